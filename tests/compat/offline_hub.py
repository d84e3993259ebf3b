"""An offline stand-in for the Hugging Face Hub that accelerate's example scripts download from, plus a recorder.

accelerate's examples fetch ``bert-base-cased`` (or a Llama-shaped ``SmolLM``), the GLUE MRPC or wikitext data
and the GLUE metric. :func:`install` points those calls at local objects built from fixed seeds, so a script runs
in seconds with no network and gives the same numbers in every process and under every library:

- ``AutoTokenizer.from_pretrained`` -> a word-level tokenizer with BERT's special tokens over 200 words;
- ``AutoModelForSequenceClassification.from_pretrained`` -> a 2-layer, 32-wide random BERT (``AutoConfig`` and
  ``AutoModelForCausalLM`` -> a Llama of the same size), its weights drawn from seed 1234 without touching the
  global random state. Neither has dropout: accelerate's prepared loaders draw from the global torch RNG at every
  ``iter()`` (torch's DataLoader takes its workers' base seed from it) and notebook_accel's on purpose do not
  (a resumed run would otherwise draw differently), so dropout masks differ between the two libraries;
- ``datasets.load_dataset`` -> a synthetic MRPC (``sentence1/sentence2/label/idx``; 64/32/16 rows) or wikitext
  (``text``; 512/64/64 lines);
- ``evaluate.load("glue", "mrpc")`` -> a metric with the same ``add_batch``/``compute`` contract and output keys.

The recorder appends one JSON line per model forward to ``<dir>/rank<r>.jsonl``: the rows of the batch (a hash
of each row of ``input_ids``), whether the model was training, the loss as an exact hexadecimal float, a hash of
the logits' bytes; and one line per metric ``compute()``. Two runs that write the same lines saw the same rows per
rank, the same per-step losses and the same eval outputs, bit for bit.

This file runs in the launched processes and imports nothing from the test suite.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import random
from pathlib import Path
from typing import Any, Callable

SEED = 1234
WORDS = [f"w{i}" for i in range(200)]
SPECIAL = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
_record_dir: Path | None = None


def _digest(data: bytes) -> str:
    return hashlib.blake2b(data, digest_size=6).hexdigest()


def record(entry: dict[str, Any]) -> None:
    """Append ``entry`` to this rank's record file (the rank of the process group, else ``RANK``, else 0)."""
    if _record_dir is None:
        return
    import torch.distributed as dist

    rank = dist.get_rank() if dist.is_available() and dist.is_initialized() else int(os.environ.get("RANK", "0"))
    with (_record_dir / f"rank{rank}.jsonl").open("a") as f:
        f.write(json.dumps(entry) + "\n")


def _on_forward(module: Any, args: tuple[Any, ...], kwargs: dict[str, Any], output: Any) -> None:
    """Record one forward: rows, mode, loss and logits."""
    ids = kwargs.get("input_ids", args[0] if args else None)
    loss = getattr(output, "loss", None)
    logits = getattr(output, "logits", None)
    record({
        "kind": "forward",
        "train": bool(module.training),
        "rows": [_digest(row.contiguous().numpy().tobytes()) for row in ids.detach().cpu()] if ids is not None else [],
        "loss": None if loss is None else float(loss.detach().float().item()).hex(),
        "logits": None if logits is None else _digest(logits.detach().float().cpu().contiguous().numpy().tobytes()),
    })


def tokenizer(*_: Any, **kwargs: Any) -> Any:
    """A word-level tokenizer over :data:`WORDS` with BERT's special tokens (``[SEP]`` is also eos), 64 tokens at most."""
    from tokenizers import Tokenizer, models, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    vocab = {word: i for i, word in enumerate(SPECIAL + WORDS)}
    core = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    core.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    core.post_processor = processors.BertProcessing(("[SEP]", vocab["[SEP]"]), ("[CLS]", vocab["[CLS]"]))
    return PreTrainedTokenizerFast(tokenizer_object=core, model_max_length=64, pad_token="[PAD]", unk_token="[UNK]",
                                   cls_token="[CLS]", sep_token="[SEP]", mask_token="[MASK]", eos_token="[SEP]")


def llama_config(*_: Any, **kwargs: Any) -> Any:
    """The tiny Llama's config (``AutoConfig.from_pretrained``)."""
    from transformers import LlamaConfig

    return LlamaConfig(vocab_size=len(SPECIAL) + len(WORDS), hidden_size=32, intermediate_size=64,
                       num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=2,
                       max_position_embeddings=128, pad_token_id=0, eos_token_id=3, bos_token_id=2)


def _built(make: Callable[[], Any]) -> Any:
    """``make()`` with seed :data:`SEED`, the global random state left as it was; hooked and in eval mode."""
    import torch

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(SEED)
        model = make()
    model.register_forward_hook(_on_forward, with_kwargs=True)
    return model.eval()  # as from_pretrained returns it


def classifier(*_: Any, **kwargs: Any) -> Any:
    """A 2-layer random BERT with a 2-class head (``AutoModelForSequenceClassification.from_pretrained``)."""
    from transformers import BertConfig, BertForSequenceClassification

    cfg = BertConfig(vocab_size=len(SPECIAL) + len(WORDS), hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                     intermediate_size=64, max_position_embeddings=128, num_labels=2,
                     hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    return _built(lambda: BertForSequenceClassification(cfg))


def causal_lm(*_: Any, config: Any = None, **kwargs: Any) -> Any:
    """A 2-layer random Llama (``AutoModelForCausalLM.from_pretrained`` / ``from_config``)."""
    from transformers import LlamaForCausalLM

    return _built(lambda: LlamaForCausalLM(llama_config() if config is None else config))


def _sentence(rng: random.Random, low: int, high: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(rng.randint(low, high)))


def load_dataset(path: str, name: str | None = None, **kwargs: Any) -> Any:
    """The synthetic MRPC (``glue``/``mrpc``) or wikitext; any other data set is refused."""
    from datasets import Dataset, DatasetDict

    rng = random.Random(SEED)
    if path.endswith("glue") and name == "mrpc":
        sizes = {"train": 64, "validation": 32, "test": 16}
        return DatasetDict({split: Dataset.from_dict({
            "sentence1": [_sentence(rng, 4, 12) for _ in range(n)],
            "sentence2": [_sentence(rng, 4, 12) for _ in range(n)],
            "label": [rng.randint(0, 1) for _ in range(n)],
            "idx": list(range(n)),
        }) for split, n in sizes.items()})
    if path.endswith("wikitext"):
        sizes = {"train": 512, "validation": 64, "test": 64}
        return DatasetDict({split: Dataset.from_dict({
            "text": [_sentence(rng, 0, 16) for _ in range(n)],
        }) for split, n in sizes.items()})
    raise ValueError(f"offline_hub has no data set {path!r} (config {name!r}); it has glue/mrpc and wikitext")


class GlueMrpc:
    """The GLUE MRPC metric: ``add_batch``/``add`` then ``compute()`` -> ``{"accuracy", "f1"}``; compute is recorded."""

    def __init__(self) -> None:
        self.predictions: list[int] = []
        self.references: list[int] = []

    def add_batch(self, predictions: Any = (), references: Any = ()) -> None:
        self.predictions += [int(p) for p in predictions]
        self.references += [int(r) for r in references]

    def add(self, prediction: Any = None, reference: Any = None) -> None:
        self.add_batch([prediction], [reference])

    def compute(self, predictions: Any = None, references: Any = None) -> dict[str, float]:
        if predictions is not None:
            self.add_batch(predictions, references)
        pairs = list(zip(self.predictions, self.references))
        self.predictions, self.references = [], []
        tp = sum(p == r == 1 for p, r in pairs)
        predicted, actual = sum(p for p, _ in pairs), sum(r for _, r in pairs)
        result = {"accuracy": sum(p == r for p, r in pairs) / len(pairs) if pairs else 0.0,
                  "f1": 2 * tp / (predicted + actual) if predicted + actual else 0.0}
        record({"kind": "metric", "n": len(pairs), **{k: v.hex() for k, v in result.items()}})
        return result


def load_metric(path: str, config_name: str | None = None, **kwargs: Any) -> GlueMrpc:
    """``evaluate.load("glue", "mrpc")``; any other metric is refused."""
    if path.endswith("glue") and config_name == "mrpc":
        return GlueMrpc()
    raise ValueError(f"offline_hub has no metric {path!r} (config {config_name!r}); it has glue/mrpc")


def install(record_dir: Path | str | None) -> None:
    """Point the Hub-reading calls of transformers, datasets and evaluate at this module; record into ``record_dir``."""
    global _record_dir
    import datasets
    import evaluate
    import transformers

    _record_dir = None if record_dir is None else Path(record_dir)
    transformers.AutoTokenizer.from_pretrained = staticmethod(tokenizer)  # type: ignore[method-assign]
    transformers.AutoConfig.from_pretrained = staticmethod(llama_config)  # type: ignore[method-assign]
    transformers.AutoModelForSequenceClassification.from_pretrained = staticmethod(classifier)  # type: ignore
    transformers.AutoModelForCausalLM.from_pretrained = staticmethod(causal_lm)  # type: ignore[method-assign]
    transformers.AutoModelForCausalLM.from_config = staticmethod(causal_lm)  # type: ignore[method-assign]
    datasets.load_dataset = load_dataset
    evaluate.load = load_metric


def recorded(main: Callable[[], Any]) -> Callable[[], None]:
    """``main`` that records ``{"kind": "end"}`` on this rank when it returns, or the error when it raises."""

    @functools.wraps(main)
    def run() -> None:
        try:
            main()
        except BaseException as exc:
            record({"kind": "error", "error": f"{type(exc).__name__}: {str(exc).strip()[:300]}"})
            raise
        record({"kind": "end"})

    return run
