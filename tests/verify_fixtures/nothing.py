print("this script produces nothing the verifier can observe")
