"""PEFT LoRA on a BERT classifier, with the script unfreezing what PEFT froze:
`--shape head`: the classifier by a name filter (no `modules_to_save`): it trains, but PEFT's
`save_pretrained` leaves it out; `--shape late`: the same after the optimizer was built, so it
never changes; `--shape all`: `model.requires_grad_(True)`, the whole base;
`--shape original`: the same name filter under `task_type="SEQ_CLS"`, which reaches only the
frozen original PEFT routes around; `--shape bias`: control, `bias="all"` under the same task type
(PEFT's own unfreezing)."""
import argparse
import tempfile

import torch
from peft import LoraConfig, get_peft_model
from transformers import BertConfig, BertForSequenceClassification, BertModel
from transformers.utils import logging

parser = argparse.ArgumentParser()
parser.add_argument("--shape", choices=["head", "late", "all", "original", "bias"], default="head")
shape = parser.parse_args().shape
logging.set_verbosity_error()
torch.manual_seed(0)
base = tempfile.mkdtemp()
BertModel(BertConfig(vocab_size=100, hidden_size=16, num_hidden_layers=2, num_attention_heads=2,
                     intermediate_size=32, max_position_embeddings=32)).save_pretrained(base)
model = BertForSequenceClassification.from_pretrained(base, num_labels=3)
task = {} if shape in ("head", "late") else {"task_type": "SEQ_CLS"}
bias = "all" if shape == "bias" else "none"
model = get_peft_model(model, LoraConfig(r=4, target_modules=["query", "value"], bias=bias, **task))
trainable = [p for p in model.parameters() if p.requires_grad]
opt = torch.optim.AdamW(trainable, lr=1e-3) if shape == "late" else None
if shape == "all":
    model.requires_grad_(True)
if shape in ("head", "original", "late"):
    for name, p in model.named_parameters():
        if "classifier" in name:
            p.requires_grad = True
opt = opt or torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-3)
for _ in range(3):
    out = model(input_ids=torch.randint(1, 100, (4, 12)), labels=torch.randint(0, 3, (4,)))
    opt.zero_grad()
    out.loss.backward()
    opt.step()
