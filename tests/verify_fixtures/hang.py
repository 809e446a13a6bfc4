import subprocess
import sys
import time

# a grandchild in the same process group: the verifier must kill the whole tree
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
print("grandchild", child.pid, flush=True)
time.sleep(600)
