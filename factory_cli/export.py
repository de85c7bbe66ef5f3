"""``factory export CHECKPOINT --format hf --output DIR``: a checkpoint as a Hugging Face model folder."""

from __future__ import annotations

import argparse

DESCRIPTION = """\
Write a checkpoint as a Hugging Face model folder: config.json (LlamaForCausalLM;
MistralForCausalLM for a sliding window, Qwen3ForCausalLM for QK-norm), generation_config.json,
model.safetensors (float32, the weights as trained), the run's tokenizer.json with
tokenizer_config.json and special_tokens_map.json, and beside them factory-lineage.json (the
data that made it, credentials masked) and factory-training-config.json.
transformers loads it with AutoModelForCausalLM/AutoTokenizer.from_pretrained(DIR), offline;
vLLM with LLM(model=DIR), SGLang with --model-path DIR.

A model setting none of these can express is refused, naming it: nothing is written. The
folder is written beside DIR and renamed into place once whole, so a failed export leaves none."""

EPILOG = "What the folder holds and what is refused: docs/training.md#export"

# An export reads only the checkpoint folder and copies its lineage as recorded: a --catalog would
# be ignored, so it is refused (factory_cli/main.py).
NO_CATALOG = "it reads only the checkpoint folder, and copies the lineage recorded there as it is"


def add_arguments(parser: argparse.ArgumentParser, _name: str = "export") -> None:
    parser.description = DESCRIPTION
    parser.epilog = EPILOG
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.add_argument(
        "checkpoint", metavar="CHECKPOINT", help="a checkpoints/step-N folder, or a run folder (its newest)"
    )
    parser.add_argument(
        "--format", choices=["hf"], default="hf", help="hf: a Hugging Face transformers folder (the default, the one)"
    )
    parser.add_argument(
        "--output", "-o", required=True, metavar="DIR", help="the folder to write: new, or empty (made if missing)"
    )
    parser.add_argument(
        "--force",
        action="store_true",
        help="replace DIR whole if it holds an earlier export (its factory-lineage.json); any other "
        "non-empty folder is refused even so",
    )


def run(args: argparse.Namespace) -> int:
    from evals.hf_export import export_hf

    exported = export_hf(args.checkpoint, args.output, force=args.force)
    print(
        f"exported step {exported.step} of {exported.checkpoint} ({exported.parameters:,} parameters) "
        f"to {exported.output}: {', '.join(exported.files)}"
    )
    print(f"load it: AutoModelForCausalLM.from_pretrained({str(exported.output)!r}) (transformers)")
    return 0
