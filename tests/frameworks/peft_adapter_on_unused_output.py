"""LoRA with `target_modules=["query", "dense"]` on a BertModel whose loss uses only the hidden
states: the suffix `"dense"` also puts an adapter on the pooler, whose output nothing uses, so
that adapter never trains (info: the library's design, with the config's fix)."""
import tempfile

import torch
from peft import LoraConfig, get_peft_model
from transformers import BertConfig, BertModel
from transformers.utils import logging

logging.set_verbosity_error()
torch.manual_seed(0)
base = tempfile.mkdtemp()
BertModel(BertConfig(vocab_size=100, hidden_size=16, num_hidden_layers=2, num_attention_heads=2,
                     intermediate_size=32, max_position_embeddings=32)).save_pretrained(base)
encoder = get_peft_model(BertModel.from_pretrained(base), LoraConfig(r=4, target_modules=["query", "dense"]))
head = torch.nn.Linear(16, 3)
opt = torch.optim.AdamW([p for p in encoder.parameters() if p.requires_grad] + list(head.parameters()), lr=1e-3)
for _ in range(3):
    hidden = encoder(input_ids=torch.randint(1, 100, (4, 12))).last_hidden_state
    loss = torch.nn.functional.cross_entropy(head(hidden[:, 0]), torch.randint(0, 3, (4,)))
    opt.zero_grad()
    loss.backward()
    opt.step()
