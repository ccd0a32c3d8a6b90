"""Fine-tuning BERT for classification from a base checkpoint (a BertModel: the classifier is newly
initialised; `--full`: a checkpoint with the classifier; `--low-mem`: the low-memory loader). A name
filter meant to train only the last encoder layer also freezes the new classifier."""
import sys
import tempfile

import torch
from transformers import BertConfig, BertForSequenceClassification, BertModel
from transformers.utils import logging

logging.set_verbosity_error()
torch.manual_seed(0)
base, saved = tempfile.mkdtemp(), BertForSequenceClassification if "--full" in sys.argv else BertModel
saved(BertConfig(vocab_size=100, hidden_size=16, num_hidden_layers=2, num_attention_heads=2, intermediate_size=32,
                 max_position_embeddings=32, num_labels=3)).save_pretrained(base)
model = BertForSequenceClassification.from_pretrained(base, num_labels=3, low_cpu_mem_usage="--low-mem" in sys.argv)
for name, p in model.named_parameters():
    if "encoder.layer.1." not in name:
        p.requires_grad = False
opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-3)
for _ in range(3):
    out = model(input_ids=torch.randint(1, 100, (4, 12)), labels=torch.randint(0, 3, (4,)))
    opt.zero_grad()
    out.loss.backward()
    opt.step()
