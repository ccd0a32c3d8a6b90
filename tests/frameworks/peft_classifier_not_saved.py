"""PEFT LoRA on a classifier fine-tuned from a base checkpoint, without `task_type` or
`modules_to_save`: PEFT freezes everything but the adapters, the newly initialised classifier
included, and it stays random while the adapters below it train."""
import tempfile

import torch
from peft import LoraConfig, get_peft_model
from transformers import BertConfig, BertForSequenceClassification, BertModel
from transformers.utils import logging

logging.set_verbosity_error()
torch.manual_seed(0)
base = tempfile.mkdtemp()
BertModel(BertConfig(vocab_size=100, hidden_size=16, num_hidden_layers=2, num_attention_heads=2,
                     intermediate_size=32, max_position_embeddings=32)).save_pretrained(base)
model = BertForSequenceClassification.from_pretrained(base, num_labels=3)
model = get_peft_model(model, LoraConfig(r=4, target_modules=["query", "value"]))
opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-3)
for _ in range(3):
    out = model(input_ids=torch.randint(1, 100, (4, 12)), labels=torch.randint(0, 3, (4,)))
    opt.zero_grad()
    out.loss.backward()
    opt.step()
