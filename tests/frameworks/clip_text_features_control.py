"""Control: a classifier on CLIP's text features (`get_text_features`, not `forward`): the
vision tower never runs and `logit_scale`, which only `CLIPModel.forward` reads, is read by no
op. The library's design: an info line at most."""
import torch
from torch import nn
from transformers import CLIPConfig, CLIPModel, CLIPTextConfig, CLIPVisionConfig

torch.manual_seed(0)
text = CLIPTextConfig(vocab_size=100, hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2,
                      max_position_embeddings=16, projection_dim=8, eos_token_id=99)
vision = CLIPVisionConfig(hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2,
                          image_size=32, patch_size=8, projection_dim=8)
clip = CLIPModel(CLIPConfig(text_config=text.to_dict(), vision_config=vision.to_dict(), projection_dim=8))
head = nn.Linear(8, 2)
opt = torch.optim.AdamW(list(clip.parameters()) + list(head.parameters()), lr=1e-3)
for _ in range(3):
    # Each text ends with the end-of-text token, as a tokenizer writes it: CLIP pools there (with
    # none, it pools the first position, whose attention sees one key: q and k get exactly zero).
    ids = torch.randint(0, 99, (4, 10))
    ids[:, -1] = 99
    feats = clip.get_text_features(input_ids=ids)
    if not isinstance(feats, torch.Tensor):  # newer transformers return an output object
        feats = feats.pooler_output
    loss = nn.functional.cross_entropy(head(feats), torch.randint(0, 2, (4,)))
    opt.zero_grad()
    loss.backward()
    opt.step()
