import sys

# prints only to stderr (not observed): the verifier sees nothing it could compare
print("this script produces nothing the verifier can observe", file=sys.stderr)
