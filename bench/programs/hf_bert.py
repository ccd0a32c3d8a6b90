"""A library transformer built from a config: transformers' BertForSequenceClassification
(4 layers, hidden 128, random init, no download), AdamW, a linear warm-up schedule from
transformers, token batches with attention masks."""

import torch
from _timing import iterations
from transformers import BertConfig, BertForSequenceClassification, get_linear_schedule_with_warmup

torch.manual_seed(1)
config = BertConfig(
    vocab_size=3000,
    hidden_size=128,
    num_hidden_layers=4,
    num_attention_heads=4,
    intermediate_size=512,
    max_position_embeddings=128,
    num_labels=3,
)
model = BertForSequenceClassification(config)
optimizer = torch.optim.AdamW(model.parameters(), lr=5e-5)
scheduler = get_linear_schedule_with_warmup(optimizer, num_warmup_steps=3, num_training_steps=30)
batches = []
for _ in range(8):
    ids = torch.randint(0, 3000, (16, 64))
    mask = torch.ones_like(ids)
    mask[:, 48:] = 0
    batches.append((ids, mask, torch.randint(0, 3, (16,))))
model.train()
for i in iterations(30):
    ids, mask, labels = batches[i % len(batches)]
    out = model(input_ids=ids, attention_mask=mask, labels=labels)
    out.loss.backward()
    optimizer.step()
    scheduler.step()
    optimizer.zero_grad()
print(f"loss {out.loss.item():.4f}")
