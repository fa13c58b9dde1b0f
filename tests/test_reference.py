"""unmask.export.reference: the PyTorch forward of docs/models.md (shapes, bidirectionality, RoPE, I/O)."""

import json

import pytest
import torch
from safetensors.torch import save_file

from unmask import ModelFormatError
from unmask.export.reference import (
    DreamModel,
    LladaModel,
    dream_config,
    llada_config,
    load_reference,
    rope,
    rope_angles,
)

V = 64


def tiny_llada(**overrides):
    torch.manual_seed(0)
    cfg = llada_config(vocab_size=V, d_model=32, n_layers=2, n_heads=4, n_kv_heads=2, mlp_hidden_size=48,
                       mask_token_id=V - 1, eos_token_id=V - 2, **overrides)
    return LladaModel(cfg).eval()


def tiny_dream():
    torch.manual_seed(1)
    cfg = dream_config(vocab_size=V, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                       num_key_value_heads=2, intermediate_size=48, mask_token_id=V - 1, eos_token_id=V - 2)
    model = DreamModel(cfg).eval()
    with torch.no_grad():  # non-zero biases so the test sees them
        for block in model.blocks:
            for proj in (block.attn.q, block.attn.k, block.attn.v):
                proj.bias.normal_(std=0.1)
    return model


MODELS = {"llada": tiny_llada, "dream": tiny_dream}


@pytest.fixture(params=sorted(MODELS))
def model(request):
    return MODELS[request.param]()


class TestForward:
    def test_shape_and_dtype(self, model):
        ids = torch.randint(0, V, (2, 7))
        logits = model(ids)
        assert logits.shape == (2, 7, V) and logits.dtype == torch.float32

    def test_attention_is_bidirectional(self, model):
        ids = torch.randint(0, V - 2, (1, 8))
        changed = ids.clone()
        changed[0, -1] = (ids[0, -1] + 1) % (V - 2)
        with torch.no_grad():
            a, b = model(ids), model(changed)
        assert not torch.allclose(a[0, 0], b[0, 0])  # the last token moves the first position's logits

    def test_default_positions_are_arange(self, model):
        ids = torch.randint(0, V, (2, 5))
        with torch.no_grad():
            explicit = model(ids, position_ids=torch.arange(5)[None].expand(2, -1))
            assert torch.equal(model(ids), explicit)

    def test_shifting_all_positions_keeps_logits(self, model):
        # RoPE scores depend only on position differences, and nothing else sees positions.
        ids = torch.randint(0, V, (1, 6))
        with torch.no_grad():
            base = model(ids, position_ids=torch.arange(6)[None])
            moved = model(ids, position_ids=torch.arange(6)[None] + 11)
        torch.testing.assert_close(base, moved, atol=1e-4, rtol=1e-4)

    def test_key_padding_mask_hides_padding(self, model):
        ids = torch.randint(0, V, (1, 5))
        padded = torch.cat([torch.zeros(1, 3, dtype=torch.long), ids], dim=1)
        mask = torch.tensor([[False] * 3 + [True] * 5])
        with torch.no_grad():
            plain = model(ids)
            masked = model(padded, position_ids=torch.tensor([[0, 0, 0, 0, 1, 2, 3, 4]]), attention_mask=mask)
        torch.testing.assert_close(plain, masked[:, 3:], atol=1e-5, rtol=1e-5)


class TestRope:
    def test_relative_position_property(self):
        torch.manual_seed(0)
        q, k = torch.randn(1, 1, 1, 8), torch.randn(1, 1, 1, 8)

        def score(pq, pk):
            cq, sq = rope_angles(torch.tensor([[pq]]), 8, 10000.0)
            ck, sk = rope_angles(torch.tensor([[pk]]), 8, 10000.0)
            return (rope(q, cq, sq) * rope(k, ck, sk)).sum()

        torch.testing.assert_close(score(3, 1), score(10, 8))
        assert not torch.allclose(score(3, 1), score(3, 2))

    def test_half_split_rotation(self):
        x = torch.tensor([[[[1.0, 2.0, 3.0, 4.0]]]])
        cos, sin = rope_angles(torch.tensor([[1]]), 4, 10000.0)
        out = rope(x, cos, sin)
        # pair j rotates (x[j], x[j + hd/2]) by angle pos * theta^(-2j/hd)
        for j, angle in enumerate([1.0, 10000.0 ** -0.5]):
            c, s = torch.cos(torch.tensor(angle)), torch.sin(torch.tensor(angle))
            x1, x2 = x[0, 0, 0, j], x[0, 0, 0, j + 2]
            torch.testing.assert_close(out[0, 0, 0, j], x1 * c - x2 * s)
            torch.testing.assert_close(out[0, 0, 0, j + 2], x2 * c + x1 * s)


class TestHfLayout:
    def test_llada_weight_names(self):
        names = set(tiny_llada().hf_names().values())
        assert "model.transformer.wte.weight" in names
        assert "model.transformer.ff_out.weight" in names
        assert "model.transformer.blocks.1.ff_proj.weight" in names
        assert not any(n.endswith(".bias") for n in names)

    def test_llada_weight_tying_drops_head(self):
        model = tiny_llada(weight_tying=True)
        assert "model.transformer.ff_out.weight" not in model.hf_names().values()
        model.blocks = torch.nn.ModuleList()  # no layers: logits = rmsnorm(wte[id]) @ wte^T
        with torch.no_grad():
            e = model.embed.weight
            expected = (e[5] * torch.rsqrt(e[5].pow(2).mean() + 1e-5)) @ e.T
            torch.testing.assert_close(model(torch.tensor([[5]]))[0, 0], expected)

    def test_dream_weight_names_have_qkv_bias(self):
        names = set(tiny_dream().hf_names().values())
        assert {"model.layers.0.self_attn.q_proj.bias", "lm_head.weight", "model.norm.weight"} <= names
        assert "model.layers.0.self_attn.o_proj.bias" not in names

    @pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
    def test_save_load_round_trip(self, model, tmp_path, dtype):
        model.save_pretrained(tmp_path, dtype=dtype)
        config = json.loads((tmp_path / "config.json").read_text())
        assert config["model_type"] == model.model_type
        loaded = load_reference(tmp_path)
        assert type(loaded) is type(model)
        ids = torch.randint(0, V, (1, 6))
        with torch.no_grad():
            if dtype == torch.float32:
                assert torch.equal(model(ids), loaded(ids))
            else:
                torch.testing.assert_close(model(ids), loaded(ids), atol=0.05, rtol=0.05)

    def test_sharded_folder(self, tmp_path):
        model = tiny_llada()
        params = dict(model.named_parameters())
        tensors = {hf: params[n].detach().clone() for n, hf in model.hf_names().items()}
        names = sorted(tensors)
        shards = {"model-00001-of-00002.safetensors": names[::2], "model-00002-of-00002.safetensors": names[1::2]}
        for file, keys in shards.items():
            save_file({k: tensors[k] for k in keys}, str(tmp_path / file))
        index = {"weight_map": {k: f for f, keys in shards.items() for k in keys}}
        (tmp_path / "model.safetensors.index.json").write_text(json.dumps(index))
        (tmp_path / "config.json").write_text(json.dumps(model.hf_config))
        ids = torch.randint(0, V, (1, 4))
        with torch.no_grad():
            assert torch.equal(model(ids), load_reference(tmp_path)(ids))


class TestBadInput:
    def test_unsupported_llada_key(self):
        with pytest.raises(ModelFormatError, match="alibi"):
            LladaModel(dict(tiny_llada().hf_config, alibi=True))

    def test_unknown_model_type(self, tmp_path):
        (tmp_path / "config.json").write_text(json.dumps({"model_type": "gpt2"}))
        with pytest.raises(ModelFormatError, match="model_type"):
            load_reference(tmp_path)

    def test_missing_weight(self, tmp_path):
        model = tiny_llada()
        model.save_pretrained(tmp_path)  # then claim one more layer than was saved
        (tmp_path / "config.json").write_text(json.dumps(dict(model.hf_config, n_layers=3)))
        with pytest.raises(ModelFormatError, match="missing"):
            load_reference(tmp_path)
