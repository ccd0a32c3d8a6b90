"""HF Trainer with a custom `compute_loss`: the head runs on BERT's pooled output, detached
(left over from a linear-probe experiment). Only the classifier learns; the encoder never
does, the loss still falls."""

import torch
import torch.nn.functional as F
from torch.utils.data import Dataset
from transformers import BertConfig, BertForSequenceClassification, Trainer, TrainingArguments


class Random(Dataset):
    def __len__(self):
        return 64

    def __getitem__(self, i):
        g = torch.Generator().manual_seed(i)
        return {"input_ids": torch.randint(0, 100, (12,), generator=g), "labels": torch.tensor(i % 2)}


class ProbeTrainer(Trainer):
    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        labels = inputs.pop("labels")
        encoded = model.bert(**inputs)
        pooled = encoded.pooler_output.detach()
        logits = model.classifier(model.dropout(pooled))
        loss = F.cross_entropy(logits, labels)
        return (loss, logits) if return_outputs else loss


def main():
    torch.manual_seed(0)
    config = BertConfig(
        vocab_size=100,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=32,
        num_labels=2,
    )
    model = BertForSequenceClassification(config)
    args = TrainingArguments(
        output_dir="out",
        per_device_train_batch_size=8,
        max_steps=4,
        logging_steps=100,
        save_strategy="no",
        report_to=[],
        use_cpu=True,
        disable_tqdm=True,
    )
    ProbeTrainer(model=model, args=args, train_dataset=Random()).train()


if __name__ == "__main__":
    main()
