"""Control: HF Trainer on a small BERT classifier with gradient accumulation."""
import torch
from torch.utils.data import Dataset
from transformers import BertConfig, BertForSequenceClassification, Trainer, TrainingArguments


class Random(Dataset):
    def __len__(self):
        return 64

    def __getitem__(self, i):
        g = torch.Generator().manual_seed(i)
        return {"input_ids": torch.randint(0, 100, (12,), generator=g), "labels": torch.tensor(i % 2)}


def main():
    torch.manual_seed(0)
    config = BertConfig(vocab_size=100, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                        intermediate_size=64, max_position_embeddings=32, num_labels=2)
    model = BertForSequenceClassification(config)
    args = TrainingArguments(output_dir="out", per_device_train_batch_size=8, max_steps=6,
                             gradient_accumulation_steps=2, logging_steps=100, save_strategy="no",
                             report_to=[], use_cpu=True, disable_tqdm=True)
    Trainer(model=model, args=args, train_dataset=Random()).train()


if __name__ == "__main__":
    main()
