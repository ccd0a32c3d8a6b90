"""gradsleuth.integrations.HuggingFaceCallback in an HF Trainer (run with plain python): PEFT
LoRA on a ViT with reentrant checkpointing turned on in TrainingArguments; the adapters never
train."""
import torch
from gradsleuth.integrations import HuggingFaceCallback
from peft import LoraConfig, get_peft_model
from torch.utils.data import Dataset
from transformers import Trainer, TrainingArguments, ViTConfig, ViTForImageClassification


class Pixels(Dataset):
    def __len__(self):
        return 32

    def __getitem__(self, i):
        g = torch.Generator().manual_seed(i)
        return {"pixel_values": torch.randn(3, 32, 32, generator=g), "labels": torch.tensor(i % 3)}


def main():
    torch.manual_seed(0)
    config = ViTConfig(image_size=32, patch_size=8, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                       intermediate_size=64, num_labels=3)
    model = get_peft_model(ViTForImageClassification(config),
                           LoraConfig(r=4, target_modules=["q_proj", "v_proj"], modules_to_save=["classifier"]))
    args = TrainingArguments(output_dir="out", per_device_train_batch_size=8, max_steps=5, save_strategy="no",
                             report_to=[], use_cpu=True, disable_tqdm=True, logging_steps=100,
                             gradient_checkpointing=True, gradient_checkpointing_kwargs={"use_reentrant": True},
                             remove_unused_columns=False)
    Trainer(model=model, args=args, train_dataset=Pixels(), callbacks=[HuggingFaceCallback(steps=3)]).train()


if __name__ == "__main__":
    main()
