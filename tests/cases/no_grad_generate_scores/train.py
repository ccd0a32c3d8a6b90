"""Policy-gradient fine-tuning of a small causal LM on its own generations: the log-probabilities
of the sampled tokens are taken from the scores `generate()` returns. `generate()` runs under
`torch.no_grad()`, so the scores have no history and the model never learns; the
log-probabilities must come from a forward pass over the generated sequence."""
import torch
from transformers import GPT2Config, GPT2LMHeadModel

torch.manual_seed(0)
config = GPT2Config(n_layer=2, n_head=2, n_embd=32, vocab_size=100, n_positions=64, bos_token_id=1, eos_token_id=2)
model = GPT2LMHeadModel(config)
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-5)


def reward_fn(tokens):
    return (tokens % 2 == 0).float().mean(1)  # a toy reward: even tokens


prompts = torch.randint(3, 100, (4, 5))
for _ in range(3):
    out = model.generate(
        prompts,
        max_new_tokens=6,
        do_sample=True,
        output_scores=True,
        return_dict_in_generate=True,
        pad_token_id=0,
    )
    generated = out.sequences[:, prompts.shape[1] :]
    logprobs = torch.stack(out.scores, dim=1).log_softmax(-1)
    token_logprobs = logprobs.gather(-1, generated.unsqueeze(-1)).squeeze(-1)
    reward = reward_fn(generated)
    loss = -((reward - reward.mean()).unsqueeze(1) * token_logprobs).mean()
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
