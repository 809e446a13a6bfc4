"""An original of the Transformers 4 / huggingface_hub 0.x era: HfFolder and encode_plus."""
import sys

from huggingface_hub import HfFolder
from transformers import AutoTokenizer

print("token set", HfFolder.get_token() is not None)
tok = AutoTokenizer.from_pretrained(sys.argv[1])
enc = tok.encode_plus("hello world", return_tensors="pt")
batch = tok.batch_encode_plus(["hello", "hello world"], padding=True)
print("ids", enc["input_ids"].shape[-1] > 0, len(batch["input_ids"]))
