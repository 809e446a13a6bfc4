print("about to fail")
raise RuntimeError("deliberate failure in the user script")
