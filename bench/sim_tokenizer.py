"""Writes a Hugging Face tokenizer.json whose token counts equal the simulator's (for
bench/equal_load.sh: clients that need a tokenizer, such as vllm-bench, get one with no
Hugging Face access). A WordLevel model over the simulator's syllables and syllable
pairs (sim/src/tokenizer.rs), split on whitespace: its decoded text is words joined by
single spaces, and the simulator's greedy longest match reads each such word (with its
leading space) as one piece, so N tokens here are N tokens there.

    python3 bench/sim_tokenizer.py OUT_DIR     (writes OUT_DIR/tokenizer.json)
"""

import os
import sys

from tokenizers import Tokenizer, models, pre_tokenizers

SYLLABLES = (
    "the an in re er on at en ed is it ou ar st ing al or ion to es ic ly ent ver com pro "
    "con ter ment ate ous ble der per ty ure ri mo la di"
).split()
assert len(SYLLABLES) == 40

words = []
for a in SYLLABLES:
    words.append(a)
    words.extend(a + b for b in SYLLABLES)
words = list(dict.fromkeys(w for w in words if len(w) < 8))  # ' ' + word fits in 8 bytes
vocab = {w: i for i, w in enumerate(words)}
vocab["[UNK]"] = len(vocab)
tok = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
tok.add_special_tokens(["[UNK]"])
out = sys.argv[1]
os.makedirs(out, exist_ok=True)
tok.save(os.path.join(out, "tokenizer.json"))
print(f"{out}/tokenizer.json: {len(vocab)} tokens")
