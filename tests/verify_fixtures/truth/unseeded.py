"""An unseeded script (as many real ones are): its printed draws match across runs only when verify seeds."""
import random

import numpy as np

print("python", round(random.random(), 6))
print("numpy", round(float(np.random.rand()), 6))
