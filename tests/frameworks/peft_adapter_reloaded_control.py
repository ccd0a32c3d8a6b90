"""Control: a LoRA adapter saved, loaded back with `PeftModel.from_pretrained` (for inference:
PEFT freezes the adapter too) and trained on by unfreezing its own weights by hand, the way
`is_trainable=True` would: the adapter trains and is saved, nothing to report."""
import tempfile

import torch
from peft import LoraConfig, PeftModel, get_peft_model
from transformers import BertConfig, BertForSequenceClassification, BertModel
from transformers.utils import logging

logging.set_verbosity_error()
torch.manual_seed(0)
base = tempfile.mkdtemp()
BertModel(BertConfig(vocab_size=100, hidden_size=16, num_hidden_layers=2, num_attention_heads=2,
                     intermediate_size=32, max_position_embeddings=32)).save_pretrained(base)
adapter = tempfile.mkdtemp()
get_peft_model(BertForSequenceClassification.from_pretrained(base, num_labels=3),
               LoraConfig(task_type="SEQ_CLS", r=4, target_modules=["query", "value"])).save_pretrained(adapter)
model = PeftModel.from_pretrained(BertForSequenceClassification.from_pretrained(base, num_labels=3), adapter)
for name, p in model.named_parameters():
    if "lora_" in name or "modules_to_save" in name:
        p.requires_grad = True
opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-3)
for _ in range(3):
    out = model(input_ids=torch.randint(1, 100, (4, 12)), labels=torch.randint(0, 3, (4,)))
    opt.zero_grad()
    out.loss.backward()
    opt.step()
