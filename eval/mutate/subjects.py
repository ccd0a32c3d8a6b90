"""The originals: real models from third-party packages (tiny configs, random init, no downloads),
each with a training loop that learns correctly, plus models of our own.

A subject's model code is the package's own module, loaded from a copy in the mutant's folder
under its real `__name__` (so relative imports resolve); mutations of model code edit that copy.
The training script is written from the subject's `build`, its batch and loss (`compute_loss`,
a helper mutations also reach) and one of several loop styles.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class Subject:
    name: str
    package: str  # where its model code comes from
    target: str | None  # module whose source is mutated (None: the model is in the script)
    build: str  # code defining `model` (M is the loaded target module)
    data: str  # code defining make_batch(step) and compute_loss(model, batch)
    loop: str = "plain"
    # The package's other modules imported names from the target before the copy was loaded
    # (`from .layer import Linear, dispatch_default` in PEFT's `lora/model.py`): rebind them to
    # the copy's, so the package builds its layers from the mutated code.
    rebind: bool = False


_TOKENS = '''
def make_batch(step):
    g = torch.Generator().manual_seed(step)
    ids = torch.randint(0, 100, (2, 12), generator=g)
    mask = torch.ones(2, 12, dtype=torch.long)
    labels = torch.randint(0, 3, (2,), generator=g)
    return {"input_ids": ids, "attention_mask": mask, "labels": labels}


def compute_loss(model, batch):
    out = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"])
    logits = out.logits
    loss = F.cross_entropy(logits, batch["labels"])
    return loss
'''

_TOKEN_TAGS = '''
def make_batch(step):
    g = torch.Generator().manual_seed(step)
    ids = torch.randint(0, 100, (2, 12), generator=g)
    labels = torch.randint(0, 3, (2, 12), generator=g)
    return {"input_ids": ids, "labels": labels}


def compute_loss(model, batch):
    logits = model(input_ids=batch["input_ids"]).logits
    flat = logits.reshape(-1, logits.shape[-1])
    loss = F.cross_entropy(flat, batch["labels"].reshape(-1))
    return loss
'''

_LM = '''
def make_batch(step):
    g = torch.Generator().manual_seed(step)
    return {"input_ids": torch.randint(0, 100, (2, 12), generator=g)}


def compute_loss(model, batch):
    ids = batch["input_ids"]
    logits = model(input_ids=ids).logits
    shifted = logits[:, :-1]
    targets = ids[:, 1:]
    loss = F.cross_entropy(shifted.reshape(-1, shifted.shape[-1]), targets.reshape(-1))
    return loss
'''

_SEQ2SEQ = '''
def make_batch(step):
    g = torch.Generator().manual_seed(step)
    src = torch.randint(2, 100, (2, 10), generator=g)
    tgt = torch.randint(2, 100, (2, 8), generator=g)
    return {"src": src, "tgt": tgt}


def compute_loss(model, batch):
    dec_in = torch.cat([torch.zeros_like(batch["tgt"][:, :1]), batch["tgt"][:, :-1]], dim=1)
    logits = model(input_ids=batch["src"], decoder_input_ids=dec_in).logits
    loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), batch["tgt"].reshape(-1))
    return loss
'''

_IMAGE_HF = '''
def make_batch(step):
    g = torch.Generator().manual_seed(step)
    return torch.randn(2, 3, 32, 32, generator=g), torch.randint(0, 3, (2,), generator=g)


def compute_loss(model, batch):
    images, labels = batch
    logits = model(pixel_values=images).logits
    loss = F.cross_entropy(logits, labels)
    return loss
'''

_IMAGE = '''
def make_batch(step):
    g = torch.Generator().manual_seed(step)
    return torch.randn(4, 3, 32, 32, generator=g), torch.randint(0, 10, (4,), generator=g)


def compute_loss(model, batch):
    images, labels = batch
    logits = model(images)
    loss = F.cross_entropy(logits, labels, label_smoothing=0.1)
    return loss
'''

_AUDIO_HF = '''
def make_batch(step):
    g = torch.Generator().manual_seed(step)
    return torch.randn(2, 800, generator=g), torch.randint(0, 3, (2,), generator=g)


def compute_loss(model, batch):
    wave, labels = batch
    logits = model(input_values=wave).logits
    loss = F.cross_entropy(logits, labels)
    return loss
'''

_SEQ_TOKENS = '''
def make_batch(step):
    g = torch.Generator().manual_seed(step)
    return torch.randint(0, 50, (4, 10), generator=g), torch.randint(0, 50, (4, 10), generator=g)


def compute_loss(model, batch):
    src, tgt = batch
    logits = model(src)
    loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), tgt.reshape(-1))
    return loss
'''

_DETECTION = '''
def make_batch(step):
    g = torch.Generator().manual_seed(step)
    images = [torch.rand(3, 64, 64, generator=g) for _ in range(2)]
    targets = []
    for _ in range(2):
        xy = torch.rand(2, 2, generator=g) * 32
        wh = 8 + torch.rand(2, 2, generator=g) * 24
        boxes = torch.cat([xy, xy + wh], dim=1)
        targets.append({"boxes": boxes, "labels": torch.randint(1, 3, (2,), generator=g)})
    return images, targets


def compute_loss(model, batch):
    images, targets = batch
    loss_dict = model(images, targets)
    loss = sum(loss for loss in loss_dict.values())
    return loss
'''

_DIFFUSION = '''
from diffusers import DDPMScheduler  # noqa: E402

noise_scheduler = DDPMScheduler(num_train_timesteps=100)


def make_batch(step):
    g = torch.Generator().manual_seed(step)
    images = torch.rand(2, 3, 16, 16, generator=g) * 2 - 1
    noise = torch.randn(images.shape, generator=g)
    timesteps = torch.randint(0, noise_scheduler.config.num_train_timesteps, (2,), generator=g)
    return images, noise, timesteps


def compute_loss(model, batch):
    images, noise, timesteps = batch
    noisy_images = noise_scheduler.add_noise(images, noise, timesteps)
    model_output = model(noisy_images, timesteps).sample
    loss = F.mse_loss(model_output.float(), noise.float())
    return loss
'''

_LATENT_DIFFUSION = '''
from diffusers import DDPMScheduler  # noqa: E402

noise_scheduler = DDPMScheduler(num_train_timesteps=100)


def make_batch(step):
    g = torch.Generator().manual_seed(step)
    latents = torch.randn(2, 4, 8, 8, generator=g)
    noise = torch.randn(latents.shape, generator=g)
    timesteps = torch.randint(0, noise_scheduler.config.num_train_timesteps, (2,), generator=g)
    text = torch.randn(2, 5, 24, generator=g)  # a text encoder's hidden states
    return latents, noise, timesteps, text


def compute_loss(model, batch):
    latents, noise, timesteps, text = batch
    noisy_latents = noise_scheduler.add_noise(latents, noise, timesteps)
    model_pred = model(noisy_latents, timesteps, encoder_hidden_states=text, return_dict=False)[0]
    loss = F.mse_loss(model_pred.float(), noise.float(), reduction="mean")
    return loss
'''

_AUTOENCODER = '''
def make_batch(step):
    g = torch.Generator().manual_seed(step)
    return torch.rand(2, 3, 16, 16, generator=g) * 2 - 1


def compute_loss(model, batch):
    posterior = model.encode(batch).latent_dist
    z = posterior.sample()
    reconstruction = model.decode(z).sample
    rec_loss = F.mse_loss(reconstruction.float(), batch.float())
    kl_loss = posterior.kl().mean()
    loss = rec_loss + 1e-4 * kl_loss
    return loss
'''

_VECTORS = '''
def make_batch(step):
    g = torch.Generator().manual_seed(step)
    x = torch.randn(8, 6, generator=g)
    return x, x.sum(dim=1, keepdim=True).sin()


def compute_loss(model, batch):
    x, y = batch
    pred = model(x)
    err = pred - y
    loss = (err ** 2).mean()
    return loss
'''

_ENERGY = '''
def make_batch(step):
    g = torch.Generator().manual_seed(step)
    x = torch.randn(8, 6, generator=g)
    return x, -2 * x


def compute_loss(model, batch):
    x, forces = batch
    x = x.clone().requires_grad_(True)
    energy = model(x).sum()
    (grad_x,) = torch.autograd.grad(energy, x, create_graph=True)
    loss = F.mse_loss(-grad_x, forces)
    return loss
'''

_OWN_MLP = '''
class GatedMLP(nn.Module):
    def __init__(self, d_in, d_hidden, d_out):
        super().__init__()
        self.inp = nn.Linear(d_in, d_hidden)
        self.blocks = nn.ModuleList([nn.Linear(d_hidden, d_hidden) for _ in range(2)])
        self.gate = nn.Parameter(torch.zeros(d_hidden))
        self.scale = nn.Parameter(torch.ones(1))
        self.out = nn.Linear(d_hidden, d_out)

    def forward(self, x):
        h = torch.tanh(self.inp(x))
        for block in self.blocks:
            update = torch.relu(block(h))
            h = h + torch.sigmoid(self.gate) * update
        y = self.out(h)
        y = y * self.scale
        return y


model = GatedMLP(6, 16, 1)
'''

_OWN_TOWERS = '''
class Tower(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.proj = nn.Linear(d, d)
        self.norm = nn.LayerNorm(d)

    def forward(self, x):
        h = self.proj(x)
        h = self.norm(h)
        return torch.nn.functional.gelu(h)


class TwoTower(nn.Module):
    def __init__(self, d=8):
        super().__init__()
        self.embed = nn.Linear(6, d)
        self.towers = nn.ModuleDict({"left": Tower(d), "right": Tower(d)})
        self.temperature = nn.Parameter(torch.tensor(1.0))
        self.head = nn.Linear(2 * d, 1)

    def forward(self, x):
        e = self.embed(x)
        left = self.towers["left"](e)
        right = self.towers["right"](e)
        both = torch.cat([left, right], dim=-1)
        score = self.head(both)
        score = score / self.temperature
        return score


model = TwoTower()
'''

_NN_TRANSFORMER = '''
class Seq2Seq(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(50, 32)
        self.core = M.Transformer(d_model=32, nhead=2, num_encoder_layers=2, num_decoder_layers=2,
                                  dim_feedforward=64, dropout=0.1, batch_first=True)
        self.head = nn.Linear(32, 50)

    def forward(self, src):
        x = self.embed(src)
        mask = M.Transformer.generate_square_subsequent_mask(src.shape[1])
        h = self.core(x, x, tgt_mask=mask, tgt_is_causal=True)
        return self.head(h)


model = Seq2Seq()
'''

_NN_LSTM = '''
class LM(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(50, 16)
        self.rnn = M.LSTM(16, 32, num_layers=2, batch_first=True, dropout=0.1)
        self.head = nn.Linear(32, 50)

    def forward(self, src):
        x = self.embed(src)
        h, _ = self.rnn(x)
        return self.head(h)


model = LM()
'''

_NN_ENCODER = '''
class Classifier(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(50, 32)
        layer = M.TransformerEncoderLayer(32, 2, dim_feedforward=64, dropout=0.1, batch_first=True,
                                          norm_first=True)
        self.encoder = M.TransformerEncoder(layer, num_layers=2, enable_nested_tensor=False)
        self.head = nn.Linear(32, 50)

    def forward(self, src):
        h = self.encoder(self.embed(src))
        return self.head(h)


model = Classifier()
'''


# Graph networks (PyTorch Geometric): one graph trained full-batch, node labels under a training
# mask (the layout of its `examples/gcn.py` on Cora), and small graphs collated into one
# disjoint batch, one label per graph (`examples/mutag_gin.py`'s).
_GRAPH_NODES = '''
def make_batch(step):
    g = torch.Generator().manual_seed(0)  # the same graph every step
    x = torch.randn(24, 8, generator=g)
    edge_index = torch.randint(0, 24, (2, 72), generator=g)
    y = torch.randint(0, 3, (24,), generator=g)
    train_mask = torch.arange(24) % 3 != 0
    return Data(x=x, edge_index=edge_index, y=y, train_mask=train_mask)


def compute_loss(model, data):
    out = model(data.x, data.edge_index)
    loss = F.cross_entropy(out[data.train_mask], data.y[data.train_mask])
    return loss
'''

_GRAPH_BATCH = '''
def make_batch(step):
    g = torch.Generator().manual_seed(step)
    graphs = []
    for n in (5, 6, 4, 7):
        edge_index = torch.randint(0, n, (2, 2 * n), generator=g)
        graphs.append(Data(x=torch.randn(n, 8, generator=g), edge_index=edge_index,
                           y=torch.randint(0, 3, (1,), generator=g)))
    return Batch.from_data_list(graphs)


def compute_loss(model, data):
    out = model(data.x, data.edge_index, data.batch)
    loss = F.cross_entropy(out, data.y)
    return loss
'''

def _pyg_two_layers(name: str, conv1: str, conv2: str, act: str, p: float) -> str:
    """A two-layer node classifier as PyTorch Geometric's examples write one (`gcn.py`,
    `gat.py`): dropout before each convolution, an activation between them."""
    return f'''
from torch_geometric.data import Data


class {name}(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = M.{conv1}
        self.conv2 = M.{conv2}

    def forward(self, x, edge_index):
        x = F.dropout(x, p={p}, training=self.training)
        x = {act}
        x = F.dropout(x, p={p}, training=self.training)
        x = self.conv2(x, edge_index)
        return x


model = {name}()
'''


_PYG_GCN = _pyg_two_layers(
    "GCN", "GCNConv(8, 16, cached=True)", "GCNConv(16, 3, cached=True)", "self.conv1(x, edge_index).relu()", 0.5
)
_PYG_GAT = _pyg_two_layers(
    "GAT",
    "GATConv(8, 8, heads=4, dropout=0.6)",
    "GATConv(8 * 4, 3, heads=1, concat=False, dropout=0.6)",
    "F.elu(self.conv1(x, edge_index))",
    0.6,
)

_PYG_GIN = '''
from torch_geometric.data import Batch, Data
from torch_geometric.nn import global_add_pool


class GraphClassifier(nn.Module):
    def __init__(self):
        super().__init__()
        self.gnn = M.GIN(8, 16, num_layers=3, out_channels=16, norm="batch_norm", jk="cat")
        self.classifier = M.MLP([16, 16, 3], norm=None, dropout=0.5)

    def forward(self, x, edge_index, batch):
        x = self.gnn(x, edge_index)
        x = global_add_pool(x, batch)
        return self.classifier(x)


model = GraphClassifier()
'''


# A GAN: a DCGAN-style generator of the script's own and a library network as the discriminator;
# its two losses as Lightning's GAN example computes them (the fakes detached for the
# discriminator's).
_GAN = '''
class Generator(nn.Module):
    def __init__(self, latent_dim=16):
        super().__init__()
        self.latent_dim = latent_dim
        self.net = nn.Sequential(
            nn.Linear(latent_dim, 64 * 4 * 4),
            nn.Unflatten(1, (64, 4, 4)),
            nn.ConvTranspose2d(64, 32, 4, 2, 1),
            nn.BatchNorm2d(32),
            nn.ReLU(True),
            nn.ConvTranspose2d(32, 16, 4, 2, 1),
            nn.BatchNorm2d(16),
            nn.ReLU(True),
            nn.ConvTranspose2d(16, 3, 4, 2, 1),
            nn.Tanh(),
        )

    def forward(self, z):
        return self.net(z)


class GAN(nn.Module):
    def __init__(self):
        super().__init__()
        self.generator = Generator()
        self.discriminator = M.shufflenet_v2_x0_5(num_classes=1)


model = GAN()
'''

_GAN_DATA = '''
def make_batch(step):
    g = torch.Generator().manual_seed(step)
    real = torch.rand(4, 3, 32, 32, generator=g) * 2 - 1
    z = torch.randn(4, 16, generator=g)
    return real, z


def generator_loss(model, batch):
    real, z = batch
    fake = model.generator(z)
    valid = torch.ones(real.size(0), 1)
    loss = F.binary_cross_entropy_with_logits(model.discriminator(fake), valid)
    return loss


def discriminator_loss(model, batch):
    real, z = batch
    valid = torch.ones(real.size(0), 1)
    real_loss = F.binary_cross_entropy_with_logits(model.discriminator(real), valid)
    fake = model.generator(z).detach()
    zeros = torch.zeros(real.size(0), 1)
    fake_loss = F.binary_cross_entropy_with_logits(model.discriminator(fake), zeros)
    loss = (real_loss + fake_loss) / 2
    return loss
'''


def _hf(cls, config):
    return f"from transformers import {config.split('(')[0]}\nmodel = M.{cls}({config})\n"


# Models that appear in two loop styles or set-ups (their own loop and the HF Trainer's, with
# activation checkpointing).
_LLAMA = _hf(
    "LlamaForCausalLM",
    "LlamaConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2, "
    "num_key_value_heads=1, vocab_size=100, max_position_embeddings=32)",
)
_BERT_CLS = _hf(
    "BertForSequenceClassification",
    "BertConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64, "
    "vocab_size=100, max_position_embeddings=32, num_labels=3)",
)
_DISTILBERT = _hf(
    "DistilBertForSequenceClassification",
    "DistilBertConfig(dim=32, n_layers=2, n_heads=2, hidden_dim=64, vocab_size=100, "
    "max_position_embeddings=32, num_labels=3)",
)

SUBJECTS = [
    Subject(
        "hf_bert_cls",
        "transformers",
        "transformers.models.bert.modeling_bert",
        _BERT_CLS,
        _TOKENS,
        "accumulation",
    ),
    Subject(
        "hf_bert_tags",
        "transformers",
        "transformers.models.bert.modeling_bert",
        _hf(
            "BertForTokenClassification",
            "BertConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64, "
            "vocab_size=100, max_position_embeddings=32, num_labels=3)",
        ),
        _TOKEN_TAGS,
    ),
    Subject(
        "hf_gpt2",
        "transformers",
        "transformers.models.gpt2.modeling_gpt2",
        _hf("GPT2LMHeadModel", "GPT2Config(n_embd=32, n_layer=2, n_head=2, vocab_size=100, n_positions=32)"),
        _LM,
        "amp",
    ),
    Subject(
        "hf_llama",
        "transformers",
        "transformers.models.llama.modeling_llama",
        _LLAMA,
        _LM,
    ),
    Subject(
        "hf_llama_trainer",
        "transformers",
        "transformers.models.llama.modeling_llama",
        _LLAMA,
        _LM,
        "trainer",
    ),
    Subject(
        "hf_t5",
        "transformers",
        "transformers.models.t5.modeling_t5",
        _hf(
            "T5ForConditionalGeneration",
            "T5Config(d_model=32, d_ff=64, d_kv=16, num_layers=2, num_heads=2, vocab_size=100, "
            "decoder_start_token_id=0)",
        ),
        _SEQ2SEQ,
    ),
    Subject(
        "hf_bart",
        "transformers",
        "transformers.models.bart.modeling_bart",
        _hf(
            "BartForConditionalGeneration",
            "BartConfig(d_model=32, encoder_layers=2, decoder_layers=2, encoder_attention_heads=2, "
            "decoder_attention_heads=2, encoder_ffn_dim=64, decoder_ffn_dim=64, vocab_size=100, "
            "max_position_embeddings=32)",
        ),
        _SEQ2SEQ,
        "two_optimizers",
    ),
    Subject(
        "hf_distilbert",
        "transformers",
        "transformers.models.distilbert.modeling_distilbert",
        _DISTILBERT,
        _TOKENS,
    ),
    Subject(
        "hf_distilbert_trainer",
        "transformers",
        "transformers.models.distilbert.modeling_distilbert",
        _DISTILBERT,
        _TOKENS,
        "trainer",
    ),
    Subject(
        "hf_vit",
        "transformers",
        "transformers.models.vit.modeling_vit",
        _hf(
            "ViTForImageClassification",
            "ViTConfig(image_size=32, patch_size=8, hidden_size=32, num_hidden_layers=2, num_attention_heads=2, "
            "intermediate_size=64, num_labels=3)",
        ),
        _IMAGE_HF,
        "two_optimizers",
    ),
    Subject(
        "hf_wav2vec2",
        "transformers",
        "transformers.models.wav2vec2.modeling_wav2vec2",
        _hf(
            "Wav2Vec2ForSequenceClassification",
            "Wav2Vec2Config(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64, "
            "conv_dim=(32, 32), conv_kernel=(10, 3), conv_stride=(5, 2), num_conv_pos_embeddings=16, "
            "num_conv_pos_embedding_groups=2, num_labels=3, layerdrop=0.1)",
        ),
        _AUDIO_HF,
    ),
    Subject(
        "hf_distilbert_lightning",
        "transformers",
        "transformers.models.distilbert.modeling_distilbert",
        _DISTILBERT,
        _TOKENS,
        "lightning",
    ),
    Subject(
        "tv_resnet18",
        "torchvision",
        "torchvision.models.resnet",
        "model = M.resnet18(num_classes=10)\n",
        _IMAGE,
        "accumulation",
    ),
    Subject(
        "tv_mobilenet_v3",
        "torchvision",
        "torchvision.models.mobilenetv3",
        "model = M.mobilenet_v3_small(num_classes=10)\n",
        _IMAGE,
    ),
    Subject(
        "tv_vit",
        "torchvision",
        "torchvision.models.vision_transformer",
        "model = M.VisionTransformer(image_size=32, patch_size=8, num_layers=2, num_heads=2, hidden_dim=32, "
        "mlp_dim=64, num_classes=10)\n",
        _IMAGE,
        "amp",
    ),
    Subject(
        "tv_convnext",
        "torchvision",
        "torchvision.models.convnext",
        "model = M.ConvNeXt([M.CNBlockConfig(16, 32, 1), M.CNBlockConfig(32, None, 1)], "
        "stochastic_depth_prob=0.2, num_classes=10)\n",
        _IMAGE,
    ),
    Subject(
        "tv_convnext_lightning",
        "torchvision",
        "torchvision.models.convnext",
        "model = M.ConvNeXt([M.CNBlockConfig(16, 32, 1), M.CNBlockConfig(32, None, 1)], "
        "stochastic_depth_prob=0.2, num_classes=10)\n",
        _IMAGE,
        "lightning",
    ),
    Subject(
        "timm_vit",
        "timm",
        "timm.models.vision_transformer",
        "model = M.VisionTransformer(img_size=32, patch_size=8, embed_dim=32, depth=2, num_heads=2, "
        "num_classes=10, drop_path_rate=0.1)\n",
        _IMAGE,
    ),
    Subject(
        "timm_resnet",
        "timm",
        "timm.models.resnet",
        "model = M.ResNet(block=M.BasicBlock, layers=[1, 1, 1, 1], num_classes=10)\n",
        _IMAGE,
        "two_optimizers",
    ),
    Subject(
        "timm_mixer",
        "timm",
        "timm.models.mlp_mixer",
        "model = M.MlpMixer(img_size=32, patch_size=8, num_blocks=2, embed_dim=32, num_classes=10)\n",
        _IMAGE,
    ),
    Subject(
        "timm_convnext",
        "timm",
        "timm.models.convnext",
        "model = M.ConvNeXt(depths=(1, 1, 1, 1), dims=(8, 16, 16, 32), num_classes=10, drop_path_rate=0.1)\n",
        _IMAGE,
        "accumulation",
    ),
    # Added as a hold-out after the analysis was last tuned on the subjects above (ALBERT's
    # weights shared across layers, DenseNet's concatenations, EfficientNet's stochastic depth,
    # Swin's windows and relative position bias): their first figures were measured before
    # any change made for them.
    Subject(
        "hf_albert",
        "transformers",
        "transformers.models.albert.modeling_albert",
        _hf(
            "AlbertForSequenceClassification",
            "AlbertConfig(embedding_size=16, hidden_size=32, num_hidden_layers=2, num_attention_heads=2, "
            "intermediate_size=64, vocab_size=100, max_position_embeddings=32, num_labels=3)",
        ),
        _TOKENS,
        "accumulation",
    ),
    Subject(
        "hf_gpt_neox",
        "transformers",
        "transformers.models.gpt_neox.modeling_gpt_neox",
        _hf(
            "GPTNeoXForCausalLM",
            "GPTNeoXConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64, "
            "vocab_size=100, max_position_embeddings=32)",
        ),
        _LM,
    ),
    Subject(
        "hf_swin",
        "transformers",
        "transformers.models.swin.modeling_swin",
        _hf(
            "SwinForImageClassification",
            "SwinConfig(image_size=32, patch_size=4, embed_dim=16, depths=[1, 1], num_heads=[2, 2], "
            "window_size=4, num_labels=3)",
        ),
        _IMAGE_HF,
        "two_optimizers",
    ),
    Subject(
        "tv_densenet",
        "torchvision",
        "torchvision.models.densenet",
        "model = M.DenseNet(growth_rate=8, block_config=(2, 2), num_init_features=16, bn_size=2, num_classes=10)\n",
        _IMAGE,
    ),
    Subject(
        "tv_efficientnet",
        "torchvision",
        "torchvision.models.efficientnet",
        "model = M.efficientnet_b0(num_classes=10)\n",
        _IMAGE,
        "amp",
    ),
    Subject(
        "timm_swin",
        "timm",
        "timm.models.swin_transformer",
        "model = M.SwinTransformer(img_size=32, patch_size=4, window_size=4, embed_dim=16, depths=(1, 1), "
        "num_heads=(2, 2), num_classes=10)\n",
        _IMAGE,
    ),
    # A second hold-out, added after the lint fixes the first one led to (ELECTRA's
    # discriminator head, OPT's embedding projections, MobileViT's unfold/fold blocks,
    # ShuffleNet's channel split, SqueezeNet's fire modules, BEiT's relative position bias).
    Subject(
        "hf_electra",
        "transformers",
        "transformers.models.electra.modeling_electra",
        _hf(
            "ElectraForSequenceClassification",
            "ElectraConfig(embedding_size=16, hidden_size=32, num_hidden_layers=2, num_attention_heads=2, "
            "intermediate_size=64, vocab_size=100, max_position_embeddings=32, num_labels=3)",
        ),
        _TOKENS,
        "two_optimizers",
    ),
    Subject(
        "hf_opt",
        "transformers",
        "transformers.models.opt.modeling_opt",
        _hf(
            "OPTForCausalLM",
            "OPTConfig(hidden_size=32, num_hidden_layers=2, ffn_dim=64, num_attention_heads=2, vocab_size=100, "
            "max_position_embeddings=32, word_embed_proj_dim=16)",
        ),
        _LM,
        "amp",
    ),
    Subject(
        "hf_mobilevit",
        "transformers",
        "transformers.models.mobilevit.modeling_mobilevit",
        _hf(
            "MobileViTForImageClassification",
            "MobileViTConfig(image_size=128, patch_size=2, hidden_sizes=[16, 24, 32], "
            "neck_hidden_sizes=[8, 8, 16, 16, 24, 24, 32], num_labels=3)",
        ),
        # 128 pixels: at 32 or 64 its last stages attend over one token, a softmax of one
        # score whose query and key get exactly zero gradient (gradsleuth says so, rightly).
        _IMAGE_HF.replace("32, 32", "128, 128"),
    ),
    Subject(
        "tv_shufflenet",
        "torchvision",
        "torchvision.models.shufflenetv2",
        "model = M.ShuffleNetV2([2, 2, 2], [8, 16, 32, 64, 128], num_classes=10)\n",
        _IMAGE,
        "accumulation",
    ),
    Subject(
        "tv_squeezenet",
        "torchvision",
        "torchvision.models.squeezenet",
        "model = M.SqueezeNet(\"1_1\", num_classes=10)\n",
        _IMAGE,
    ),
    Subject(
        "timm_beit",
        "timm",
        "timm.models.beit",
        "model = M.Beit(img_size=32, patch_size=8, embed_dim=32, depth=2, num_heads=2, num_classes=10, "
        "use_rel_pos_bias=True)\n",
        _IMAGE,
    ),
    # PEFT's LoRA layers (the mutated code) on a library model, the base frozen by
    # `get_peft_model`; the optimizer gets every parameter, as PEFT's own examples do.
    Subject(
        "peft_llama_lora",
        "peft",
        "peft.tuners.lora.layer",
        _LLAMA.replace("model = M.", "from transformers import LlamaForCausalLM\nmodel = ")
        + "from peft import LoraConfig, get_peft_model\n"
        + "model = get_peft_model(model, LoraConfig(r=4, lora_alpha=8, target_modules=['q_proj', 'v_proj'], "
        + "lora_dropout=0.05))\n",
        _LM,
        rebind=True,
    ),
    # A classifier trained with LoRA on every linear layer, the new head saved by PEFT
    # (`task_type`), every parameter split between two optimizers.
    Subject(
        "peft_bert_lora",
        "peft",
        "peft.tuners.lora.layer",
        "from transformers import BertConfig, BertForSequenceClassification\n"
        "model = BertForSequenceClassification(BertConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, "
        "intermediate_size=64, vocab_size=100, max_position_embeddings=32, num_labels=3))\n"
        + "from peft import LoraConfig, get_peft_model\n"
        + "model = get_peft_model(model, LoraConfig(task_type='SEQ_CLS', r=4, lora_alpha=8, "
        + "target_modules=['query', 'value', 'dense']))\n",
        _TOKENS,
        "two_optimizers",
        rebind=True,
    ),
    # The same models in Accelerate's loop.
    Subject(
        "hf_roberta_accelerate",
        "transformers",
        "transformers.models.roberta.modeling_roberta",
        _hf(
            "RobertaForSequenceClassification",
            "RobertaConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64, "
            "vocab_size=100, max_position_embeddings=40, num_labels=3)",
        ),
        _TOKENS,
        "accelerate",
    ),
    Subject(
        "tv_mnasnet_accelerate",
        "torchvision",
        "torchvision.models.mnasnet",
        "model = M.mnasnet0_5(num_classes=10)\n",
        _IMAGE,
        "accelerate",
    ),
    # A third hold-out: torchvision's detectors in the style of torchvision's own detection
    # reference script (`references/detection`): a backbone whose first stages are frozen by
    # design (`trainable_layers`), proposals detached by design, a dict of losses summed.
    Subject(
        "tv_fasterrcnn",
        "torchvision",
        "torchvision.models.detection.roi_heads",
        "from torchvision.models.detection import FasterRCNN\n"
        "from torchvision.models.detection.backbone_utils import resnet_fpn_backbone\n"
        "backbone = resnet_fpn_backbone(backbone_name='resnet18', weights=None, trainable_layers=3)\n"
        "model = FasterRCNN(backbone, num_classes=3, min_size=64, max_size=64, rpn_batch_size_per_image=32, "
        "box_batch_size_per_image=32)\n",
        _DETECTION,
        "detection",
        rebind=True,
    ),
    Subject(
        "tv_retinanet",
        "torchvision",
        "torchvision.models.detection.retinanet",
        "from torchvision.models.detection.backbone_utils import resnet_fpn_backbone\n"
        "from torchvision.ops.feature_pyramid_network import LastLevelP6P7\n"
        "backbone = resnet_fpn_backbone(backbone_name='resnet18', weights=None, trainable_layers=3, "
        "returned_layers=[2, 3, 4], extra_blocks=LastLevelP6P7(256, 256))\n"
        "model = M.RetinaNet(backbone, num_classes=3, min_size=64, max_size=64)\n",
        _DETECTION,
        "detection",
    ),
    # A fifth hold-out: Hugging Face diffusers' denoising UNets and autoencoder, in the style of
    # its own training scripts (`examples/unconditional_image_generation/train_unconditional.py`,
    # `text_to_image/train_text_to_image.py`): noise added by a DDPM scheduler, the noise
    # predicted, an EMA copy of the weights stepped after the optimizer; the KL autoencoder
    # trained on reconstruction plus its posterior's KL.
    Subject(
        "df_unet",
        "diffusers",
        "diffusers.models.unets.unet_2d",
        "model = M.UNet2DModel(sample_size=16, in_channels=3, out_channels=3, layers_per_block=1, "
        "block_out_channels=(16, 32), "
        "down_block_types=('DownBlock2D', 'AttnDownBlock2D'), up_block_types=('AttnUpBlock2D', 'UpBlock2D'), "
        "norm_num_groups=8)\n",
        _DIFFUSION,
        "diffusion",
    ),
    Subject(
        "df_resnet",
        "diffusers",
        "diffusers.models.resnet",
        "from diffusers import UNet2DModel\n"
        "model = UNet2DModel(sample_size=16, in_channels=3, out_channels=3, layers_per_block=1, "
        "block_out_channels=(16, 32), "
        "down_block_types=('DownBlock2D', 'AttnDownBlock2D'), up_block_types=('AttnUpBlock2D', 'UpBlock2D'), "
        "norm_num_groups=8)\n",
        _DIFFUSION,
        "diffusion",
        rebind=True,
    ),
    Subject(
        "df_unet_cond",
        "diffusers",
        "diffusers.models.unets.unet_2d_condition",
        "model = M.UNet2DConditionModel(sample_size=8, in_channels=4, out_channels=4, layers_per_block=1, "
        "block_out_channels=(16, 32), down_block_types=('CrossAttnDownBlock2D', 'DownBlock2D'), "
        "up_block_types=('UpBlock2D', 'CrossAttnUpBlock2D'), cross_attention_dim=24, norm_num_groups=8, "
        "attention_head_dim=4)\n",
        _LATENT_DIFFUSION,
        "diffusion",
    ),
    Subject(
        "df_autoencoder",
        "diffusers",
        "diffusers.models.autoencoders.vae",
        "from diffusers import AutoencoderKL\n"
        "model = AutoencoderKL(in_channels=3, out_channels=3, down_block_types=('DownEncoderBlock2D', "
        "'DownEncoderBlock2D'), up_block_types=('UpDecoderBlock2D', 'UpDecoderBlock2D'), block_out_channels=(16, 32), "
        "latent_channels=4, norm_num_groups=8, sample_size=16)\n",
        _AUTOENCODER,
        rebind=True,
    ),
    # A sixth hold-out: activation checkpointing switched on the way fine-tuning scripts do
    # (`model.gradient_checkpointing_enable()`, transformers' alias; TRL's and older scripts'
    # `use_reentrant=True`, the library's default `use_reentrant=False`): each layer's forward
    # runs twice, the second time inside backward; LoRA's adapters behind a frozen, reentrant
    # checkpointed base reach the loss only because the library makes the inputs require grad.
    Subject(
        "hf_llama_ckpt",
        "transformers",
        "transformers.models.llama.modeling_llama",
        _LLAMA + "model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={'use_reentrant': True})\n",
        _LM,
    ),
    Subject(
        "hf_bert_ckpt",
        "transformers",
        "transformers.models.bert.modeling_bert",
        _BERT_CLS + "model.gradient_checkpointing_enable()\n",
        _TOKENS,
        "accumulation",
    ),
    Subject(
        "peft_llama_lora_ckpt",
        "peft",
        "peft.tuners.lora.layer",
        _LLAMA.replace("model = M.", "from transformers import LlamaForCausalLM\nmodel = ")
        + "model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={'use_reentrant': True})\n"
        + "from peft import LoraConfig, get_peft_model\n"
        + "model = get_peft_model(model, LoraConfig(r=4, lora_alpha=8, target_modules=['q_proj', 'v_proj', "
        + "'down_proj'], lora_dropout=0.05))\n",
        _LM,
        rebind=True,
    ),
    # A seventh hold-out: graph networks from PyTorch Geometric in the style of its own examples
    # (`examples/gcn.py`, `gat.py`, `mutag_gin.py`): message passing whose `propagate` the library
    # generates from a template into a file of its own, scatter reductions over edges, a
    # normalised adjacency cached after the first step (`cached=True`), evaluation under
    # `no_grad` between epochs.
    Subject("pyg_gcn", "torch_geometric", "torch_geometric.nn.conv.gcn_conv", _PYG_GCN, _GRAPH_NODES, "graph"),
    Subject("pyg_gat", "torch_geometric", "torch_geometric.nn.conv.gat_conv", _PYG_GAT, _GRAPH_NODES, "graph"),
    Subject("pyg_gin", "torch_geometric", "torch_geometric.nn.models.basic_gnn", _PYG_GIN, _GRAPH_BATCH),
    # An eighth hold-out: Lightning's manual optimization, the way its own GAN example trains
    # (`examples/pytorch/domain_templates/generative_adversarial_net.py`): two optimizers,
    # `toggle_optimizer` (which turns off `requires_grad` of every parameter the other optimizer
    # holds, and back), `self.manual_backward`, the fakes detached for the discriminator.
    Subject("lightning_gan", "torchvision", "torchvision.models.shufflenetv2", _GAN, _GAN_DATA, "lightning_gan"),
    Subject("nn_transformer", "torch", "torch.nn.modules.transformer", _NN_TRANSFORMER, _SEQ_TOKENS),
    Subject("nn_encoder", "torch", "torch.nn.modules.transformer", _NN_ENCODER, _SEQ_TOKENS, "amp"),
    Subject("nn_lstm", "torch", "torch.nn.modules.rnn", _NN_LSTM, _SEQ_TOKENS),
    Subject("own_gated_mlp", "own", None, _OWN_MLP, _VECTORS),
    Subject("own_two_tower", "own", None, _OWN_TOWERS, _VECTORS, "accumulation"),
    Subject("own_energy", "own", None, _OWN_MLP, _ENERGY),
]


def _lightning_fit(max_steps: str, *extra: str, note: str = "") -> str:
    """Lightning's Trainer on CPU, quiet, fitting `lit` on the step numbers (`note`: a comment
    on `max_steps`)."""
    args = ['accelerator="cpu"', "devices=1", *extra, "logger=False", "enable_checkpointing=False"]
    args += ["enable_progress_bar=False", "enable_model_summary=False", "num_sanity_val_steps=0"]
    args += ['default_root_dir=os.path.join(os.path.dirname(os.path.abspath(__file__)), "lightning_out")']
    lines = f"    max_steps={max_steps},{note}\n" + "".join(f"    {a},\n" for a in args)
    fit = "trainer.fit(lit, torch.utils.data.DataLoader(range(STEPS), batch_size=1))\n"
    return f"trainer = L.Trainer(\n{lines})\n{fit}"


LOOPS = {
    "plain": '''
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
max_norm = 1.0
model.train()
for step in range(STEPS):
    batch = make_batch(step)
    loss = compute_loss(model, batch)
    optimizer.zero_grad()
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    optimizer.step()
    print(f"step {step}: loss {loss.item():.4f}")
''',
    "accumulation": '''
accumulate = 2
max_norm = 1.0
optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
model.train()
optimizer.zero_grad()
for i in range(STEPS * accumulate):
    batch = make_batch(i)
    loss = compute_loss(model, batch) / accumulate
    loss.backward()
    if (i + 1) % accumulate == 0:
        torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
        optimizer.step()
        optimizer.zero_grad()
''',
    "amp": '''
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.0)
max_norm = 1.0
model.train()
for step in range(STEPS):
    batch = make_batch(step)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        loss = compute_loss(model, batch)
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    optimizer.step()
''',
    "two_optimizers": '''
head_names = {"classifier", "head", "fc", "lm_head", "score"}
named = list(model.named_parameters())
head_params = [p for n, p in named if n.split(".")[0] in head_names]
if not head_params:  # a head tied to the embeddings (BART's lm_head): the last layers instead
    head_params = [p for _, p in named[-max(1, len(named) // 4) :]]
body_params = [p for _, p in named if all(p is not q for q in head_params)]
optimizer = torch.optim.AdamW(body_params, lr=1e-4)
head_optimizer = torch.optim.AdamW(head_params, lr=1e-3)
max_norm = 1.0
model.train()
for step in range(STEPS):
    batch = make_batch(step)
    loss = compute_loss(model, batch)
    optimizer.zero_grad()
    head_optimizer.zero_grad()
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    optimizer.step()
    head_optimizer.step()
''',
    # The framework's loop: a Hugging Face `Trainer` subclass whose `compute_loss` is the
    # subject's (the style of transformers' own examples and TRL); the optimizer, clipping,
    # zero_grad and backward are the Trainer's.
    "trainer": '''
from transformers import Trainer, TrainingArguments  # noqa: E402


class Steps(torch.utils.data.Dataset):
    """Step numbers: each training step builds its own batch."""

    def __len__(self):
        return STEPS

    def __getitem__(self, i):
        return i


class LossTrainer(Trainer):
    def compute_loss(self, model, inputs, return_outputs=False, **kwargs):
        loss = compute_loss(model, make_batch(int(inputs["step"][0])))
        return (loss, None) if return_outputs else loss


args = TrainingArguments(
    output_dir=os.path.join(os.path.dirname(os.path.abspath(__file__)), "trainer_out"),
    per_device_train_batch_size=1,
    max_steps=STEPS,
    learning_rate=1e-3,
    max_grad_norm=1.0,
    lr_scheduler_type="constant",
    save_strategy="no",
    logging_strategy="no",
    report_to=[],
    use_cpu=True,
    disable_tqdm=True,
    seed=0,
)
trainer = LossTrainer(
    model=model,
    args=args,
    train_dataset=Steps(),
    data_collator=lambda items: {"step": torch.tensor(items)},
)
trainer.train()
''',
    # Lightning's loop: a LightningModule holding the subject's model, whose `training_step`
    # calls it directly (the style of Lightning's own examples); forward, zero_grad and
    # backward run inside the closure Lightning passes to `optimizer.step`, clipping is the
    # Trainer's.
    "lightning": '''
import lightning as L  # noqa: E402


class LitModel(L.LightningModule):
    def __init__(self, model):
        super().__init__()
        self.model = model

    def training_step(self, step, batch_idx):
        loss = compute_loss(self.model, make_batch(int(step[0])))
        return loss

    def configure_optimizers(self):
        optimizer = torch.optim.AdamW(self.model.parameters(), lr=1e-3)
        return optimizer


max_norm = 1.0
lit = LitModel(model)
'''
    + _lightning_fit("STEPS", "gradient_clip_val=max_norm"),
    # Hugging Face Accelerate's loop (the style of its `by_feature/gradient_accumulation.py`):
    # `prepare`, `accumulate`, `accelerator.backward`, clipping only on the synchronising
    # micro-step; the wrapped optimizer steps every micro-step and applies every second one.
    "accelerate": '''
from accelerate import Accelerator  # noqa: E402

accelerator = Accelerator(cpu=True, gradient_accumulation_steps=2)
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda i: 1.0)
model, optimizer, scheduler = accelerator.prepare(model, optimizer, scheduler)
max_norm = 1.0
model.train()
for i in range(STEPS * 2):
    batch = make_batch(i)
    with accelerator.accumulate(model):
        loss = compute_loss(model, batch)
        accelerator.backward(loss)
        if accelerator.sync_gradients:
            accelerator.clip_grad_norm_(model.parameters(), max_norm)
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad()
''',
    # torchvision's detection reference loop (`references/detection/engine.py`'s style): only
    # the parameters that require grad go to SGD, a linear warm-up schedule, a finite-loss
    # check before the step.
    "detection": '''
import math  # noqa: E402

params = [p for p in model.parameters() if p.requires_grad]
optimizer = torch.optim.SGD(params, lr=0.02, momentum=0.9, weight_decay=1e-4)
lr_scheduler = torch.optim.lr_scheduler.LinearLR(optimizer, start_factor=0.1, total_iters=STEPS)
model.train()
for step in range(STEPS):
    batch = make_batch(step)
    losses = compute_loss(model, batch)
    loss_value = losses.item()
    if not math.isfinite(loss_value):
        print(f"Loss is {loss_value}, stopping training")
        sys.exit(1)
    optimizer.zero_grad()
    losses.backward()
    optimizer.step()
    lr_scheduler.step()
''',
    # diffusers' training scripts' loop (`train_unconditional.py`'s style, without Accelerate):
    # AdamW under a cosine schedule with warm-up, clipping, and an EMA of the weights stepped
    # after the optimizer (its shadow copies are no parameters of the model and take no gradient).
    "diffusion": '''
from diffusers.optimization import get_scheduler  # noqa: E402
from diffusers.training_utils import EMAModel  # noqa: E402

optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, betas=(0.95, 0.999), weight_decay=1e-6, eps=1e-8)
lr_scheduler = get_scheduler("cosine", optimizer=optimizer, num_warmup_steps=1, num_training_steps=STEPS)
ema_model = EMAModel(model.parameters(), decay=0.9999, use_ema_warmup=True, inv_gamma=1.0, power=3 / 4)
model.train()
for step in range(STEPS):
    batch = make_batch(step)
    loss = compute_loss(model, batch)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()
    lr_scheduler.step()
    optimizer.zero_grad()
    ema_model.step(model.parameters())
''',
    # PyTorch Geometric's examples' loop (`examples/gcn.py`): Adam with weight decay, a
    # `train()` that returns the loss as a float, a `test()` under `no_grad` after every epoch.
    "graph": '''
optimizer = torch.optim.Adam(model.parameters(), lr=0.01, weight_decay=5e-4)


def train(data):
    model.train()
    optimizer.zero_grad()
    loss = compute_loss(model, data)
    loss.backward()
    optimizer.step()
    return float(loss)


@torch.no_grad()
def test(data):
    model.eval()
    pred = model(data.x, data.edge_index).argmax(dim=-1)
    return int((pred == data.y).sum()) / int(data.y.numel())


for epoch in range(STEPS):
    data = make_batch(epoch)
    loss = train(data)
    acc = test(data)
    print(f"epoch {epoch}: loss {loss:.4f}, accuracy {acc:.4f}")
''',
    # Lightning's manual optimization, as its GAN example: the generator's step then the
    # discriminator's, each between `toggle_optimizer` and `untoggle_optimizer`.
    "lightning_gan": '''
import lightning as L  # noqa: E402


class LitGAN(L.LightningModule):
    def __init__(self, model):
        super().__init__()
        self.automatic_optimization = False
        self.model = model

    def training_step(self, step, batch_idx):
        optimizer_g, optimizer_d = self.optimizers()
        batch = make_batch(int(step[0]))
        self.toggle_optimizer(optimizer_g)
        g_loss = generator_loss(self.model, batch)
        self.manual_backward(g_loss)
        optimizer_g.step()
        optimizer_g.zero_grad()
        self.untoggle_optimizer(optimizer_g)
        self.toggle_optimizer(optimizer_d)
        d_loss = discriminator_loss(self.model, batch)
        self.manual_backward(d_loss)
        optimizer_d.step()
        optimizer_d.zero_grad()
        self.untoggle_optimizer(optimizer_d)

    def configure_optimizers(self):
        opt_g = torch.optim.Adam(self.model.generator.parameters(), lr=2e-4, betas=(0.5, 0.999))
        opt_d = torch.optim.Adam(self.model.discriminator.parameters(), lr=2e-4, betas=(0.5, 0.999))
        return [opt_g, opt_d], []


lit = LitGAN(model)
'''
    + _lightning_fit("2 * STEPS", note="  # each optimizer's step counts"),
}

STEPS = 3


def script(subject: Subject, target_file: str | None) -> str:
    """The training script of a subject (the original; mutants edit it or the target copy)."""
    head = [
        '"""A training script written by the mutation harness (eval/mutate)."""',
        "import importlib.util",
        "import os",
        "import sys",
        "",
        "import torch",
        "import torch.nn as nn",
        "import torch.nn.functional as F",
        "",
        f"STEPS = {STEPS}",
        "torch.manual_seed(0)",
        "",
    ]
    if subject.target:
        parent = subject.target.rsplit(".", 1)[0]
        head += [
            f"import {parent}  # noqa: E402",
            "",
            "",
            "def load_model_code(name, file):",
            '    """The model code from a copy next to this script, under its real name."""',
            "    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), file)",
            "    # torchvision's model registry refuses a name twice: the copy replaces the original's entries.",
            "    registry = getattr(sys.modules.get('torchvision.models._api'), 'BUILTIN_MODELS', {})",
            "    for key in [k for k, fn in registry.items() if getattr(fn, '__module__', None) == name]:",
            "        del registry[key]",
            "    spec = importlib.util.spec_from_file_location(name, path)",
            "    module = importlib.util.module_from_spec(spec)",
        ]
        if subject.rebind:
            head += ["    original = sys.modules.get(name)"]
        head += [
            "    sys.modules[name] = module",
            "    spec.loader.exec_module(module)",
        ]
        if subject.rebind:
            head += [
                "    # The package's modules that imported the original's classes and functions use the copy's.",
                "    copies = {id(v): getattr(module, k) for k, v in vars(original).items()",
                "              if callable(v) and getattr(v, '__module__', None) == name and hasattr(module, k)}",
                "    top = name.split('.')[0] + '.'",
                "    for mname, m in list(sys.modules.items()):",
                "        if m is None or m is module or m is original or not mname.startswith(top):",
                "            continue",
                "        for k, v in list(vars(m).items()):",
                "            if id(v) in copies:",
                "                setattr(m, k, copies[id(v)])",
                "            elif isinstance(v, type) and getattr(v, '__module__', '').startswith(top):",
                "                for ck, cv in list(vars(v).items()):",
                "                    if id(cv) in copies:",
                "                        setattr(v, ck, copies[id(cv)])",
            ]
        head += [
            "    return module",
            "",
            "",
            f'M = load_model_code("{subject.target}", "{target_file}")',
        ]
    body = subject.build.strip("\n") + "\n\n" + subject.data.strip("\n") + "\n"
    return "\n".join(head) + "\n" + body + "\n" + LOOPS[subject.loop].lstrip("\n")
