"""A library transformer trained by Hugging Face's `Trainer`: BertForSequenceClassification
(4 layers, hidden 128, random init, no download), the Trainer's own AdamW, loop and data
collation; iterations are timed from a TrainerCallback (the loop is the Trainer's)."""

import torch
from _timing import iterations
from torch.utils.data import Dataset
from transformers import BertConfig, BertForSequenceClassification, Trainer, TrainerCallback, TrainingArguments

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


class Tokens(Dataset):
    def __len__(self):
        return 16 * 400

    def __getitem__(self, i):
        g = torch.Generator().manual_seed(i % 128)
        return {"input_ids": torch.randint(0, 3000, (64,), generator=g), "labels": torch.tensor(i % 3)}


class Timed(TrainerCallback):
    """Each optimizer step is one timed iteration; training stops when the schedule ends."""

    def __init__(self):
        self.it = iterations(30)

    def on_step_begin(self, args, state, control, **kwargs):
        if next(self.it, None) is None:
            control.should_training_stop = True


args = TrainingArguments(
    output_dir="/tmp/gs-bench-hf-trainer",
    per_device_train_batch_size=16,
    max_steps=400,
    save_strategy="no",
    report_to=[],
    use_cpu=True,
    disable_tqdm=True,
    logging_steps=10_000,
    dataloader_num_workers=0,
)
Trainer(model=BertForSequenceClassification(config), args=args, train_dataset=Tokens(), callbacks=[Timed()]).train()
