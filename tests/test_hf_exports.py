"""Hugging Face models as today's PyTorch exports them with default settings (TorchScript and
dynamo exporters): small BERT, DistilBERT and GPT-2 configurations with random weights (no
download), each compiled whole and run, and run through `--emit ort` with and without the
library, against onnxruntime on the export. transformers and torch are test-only dependencies;
without them these tests skip.
"""

from __future__ import annotations

import pathlib
import sys
import warnings

import numpy as np
import pytest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from test_ort_library import check_three_ways  # noqa: E402

pytestmark = pytest.mark.torch

SEQ = 16
VOCAB = 100


def _modules() -> dict:
    transformers = pytest.importorskip("transformers")
    torch = pytest.importorskip("torch")
    pytest.importorskip("onnxscript")
    t = transformers
    small = {"vocab_size": VOCAB}
    configs = {
        "bert": (t.BertModel, t.BertConfig(**small, hidden_size=32, num_hidden_layers=2,
                                          num_attention_heads=4, intermediate_size=64,
                                          max_position_embeddings=64, use_cache=False)),
        "distilbert": (t.DistilBertModel, t.DistilBertConfig(**small, dim=32, n_layers=2,
                                                             n_heads=4, hidden_dim=64,
                                                             max_position_embeddings=64)),
        "gpt2": (t.GPT2Model, t.GPT2Config(**small, n_embd=32, n_layer=2, n_head=4,
                                          n_positions=64, use_cache=False)),
    }

    class LastHiddenState(torch.nn.Module):
        def __init__(self, model: torch.nn.Module) -> None:
            super().__init__()
            self.model = model

        def forward(self, input_ids, attention_mask):
            return self.model(input_ids=input_ids,
                              attention_mask=attention_mask).last_hidden_state

    torch.manual_seed(0)
    return {name: LastHiddenState(cls(config)).eval() for name, (cls, config) in configs.items()}


@pytest.fixture(scope="module")
def exports(tmp_path_factory: pytest.TempPathFactory) -> dict[str, pathlib.Path]:
    import torch

    folder = tmp_path_factory.mktemp("hf")
    ids = torch.randint(0, VOCAB, (1, SEQ))
    mask = torch.ones(1, SEQ, dtype=torch.int64)
    paths = {}
    for name, module in _modules().items():
        for dynamo in (False, True):
            path = folder / f"{name}_{'dynamo' if dynamo else 'ts'}.onnx"
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                torch.onnx.export(module, (ids, mask), str(path), dynamo=dynamo,
                                  input_names=["input_ids", "attention_mask"],
                                  output_names=["last_hidden_state"])
            paths[path.stem] = path
    return paths


def _feed() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(5)
    mask = np.ones((1, SEQ), np.int64)
    mask[0, -3:] = 0  # padding at the end, as a batch of unequal lengths has
    return {"input_ids": rng.integers(0, VOCAB, (1, SEQ), dtype=np.int64),
            "attention_mask": mask}


@pytest.mark.parametrize("name", [f"{m}_{e}" for m in ("bert", "distilbert", "gpt2")
                                  for e in ("ts", "dynamo")])
def test_emit_ort_runs_the_export_with_and_without_the_library(name, exports, tmp_path):
    result, _ = check_three_ways(exports[name], tmp_path / "out", feed=_feed())
    compiled = sum(len(ops) for _, ops in result.islands)
    assert compiled > 5 * len(result.left_out), (result.islands, result.left_out)


@pytest.mark.parametrize("name", [f"{m}_{e}" for m in ("bert", "distilbert", "gpt2")
                                  for e in ("ts", "dynamo")])
def test_the_export_compiles_whole_and_matches_onnxruntime(name, exports):
    """The whole export compiled (IsNaN, GatherElements and GatherND included) and run
    in-process, against onnxruntime on the export."""
    import onnxruntime as ort
    from program_runner import assert_close, compile_onnx, run_program

    path = exports[name]
    feed = _feed()
    program = compile_onnx(path)
    got = run_program(program, [feed[i.name] for i in program.inputs])
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    for g, w in zip(got, sess.run(None, feed), strict=True):
        assert_close(g, w, tol=1e-4)
