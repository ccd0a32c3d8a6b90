"""PEFT LoRA on a ViT, gradient checkpointing turned on (reentrant) after get_peft_model:
the pixel inputs do not require grad, so the checkpointed layers record nothing and the
adapters never train."""
import torch
from peft import LoraConfig, get_peft_model
from transformers import ViTConfig, ViTForImageClassification

torch.manual_seed(0)
config = ViTConfig(image_size=32, patch_size=8, num_channels=3, hidden_size=32, num_hidden_layers=2,
                   num_attention_heads=2, intermediate_size=64, num_labels=3)
model = ViTForImageClassification(config)
lora = LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"], modules_to_save=["classifier"])
model = get_peft_model(model, lora)
model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": True})
model.train()
opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-3)
for _ in range(4):
    pixel_values = torch.randn(4, 3, 32, 32)
    labels = torch.randint(0, 3, (4,))
    loss = model(pixel_values=pixel_values, labels=labels).loss
    opt.zero_grad()
    loss.backward()
    opt.step()
