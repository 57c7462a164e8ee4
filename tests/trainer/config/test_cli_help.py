"""`python recipes/<x>.py --help`: every key of the entry point with help text and default, from the schema."""

import re
import subprocess
import sys

import pytest

from recipe_utils import ROOT
from trainer.config.cli_help import exit_with_help_if_asked, render_help
from trainer.config import SCHEMAS, help_text

ENTRY_SCHEMAS = {"dpo": "dpo_schema", "sft": "sft_schema", "grpo": "grpo_schema", "evaluate": "evaluate_schema"}


def _check_lists_every_key(out: str, schema) -> None:
    lines = out.splitlines()
    for key, text, _default, allowed in help_text(schema):
        i = next((n for n, line in enumerate(lines) if line.startswith(f"  {key} = ")), None)
        assert i is not None, f"{key} missing from --help"
        body = []
        for line in lines[i + 1:]:
            if not line.startswith("      "):
                break
            body.append(line.strip())
        assert " ".join(body) == " ".join(text.split()), key
        if allowed:
            assert " | ".join(allowed) in lines[i], key


@pytest.mark.parametrize("name", sorted(ENTRY_SCHEMAS))
def test_help_lists_every_key_grouped_with_help_and_values(name):
    out = render_help(name)
    _check_lists_every_key(out, SCHEMAS[ENTRY_SCHEMAS[name]])
    groups = re.findall(r"^\[([^]]+)\]", out, flags=re.M)
    assert groups[0] == "top level" and "model" in groups and len(groups) == len(set(groups))
    assert re.search(r"^  model=tiny +options: .*qwen3_4b", out, flags=re.M)


def test_help_shows_the_command_line_values_and_schema_defaults():
    out = render_help("grpo", ["algo.aggregation=sequence_mean", "model.lora.r=4"])
    assert "  algo.aggregation = sequence_mean  [default token_mean; token_mean | sequence_mean]" in out
    assert "  model.lora.r = 4  [default 16]" in out
    assert "  algo.std_scaling = group  [group | batch | none]" in out   # same as the schema: no default note
    bad = render_help("grpo", ["algo.aggregation=sum"])
    assert "does not compose" in bad and "sum" in bad and "  algo.aggregation = token_mean  [token_mean | sequence_mean]" in bad


def test_help_flag_exits_zero_and_other_arguments_pass_through(capsys):
    exit_with_help_if_asked("sft", ["trainer.max_steps=5"])  # no --help: returns
    assert capsys.readouterr().out == ""
    with pytest.raises(SystemExit) as e:
        exit_with_help_if_asked("sft", ["-h", "trainer.max_steps=5"])
    assert e.value.code == 0 and "  trainer.max_steps = 5  [default 300]" in capsys.readouterr().out


def test_every_recipe_asks_for_its_own_help_before_hydra():
    for path in sorted((ROOT / "recipes").glob("*.py")):
        text = path.read_text()
        if "@hydra.main(" in text:
            config_name = re.search(r'@hydra.main\(.*config_name="(\w+)"', text).group(1)
            assert f'if __name__ == "__main__":\n    cli_main("{config_name}", main)\n' in text, path.name


def test_recipe_help_from_the_command_line():
    proc = subprocess.run([sys.executable, str(ROOT / "recipes" / "dpo.py"), "--help", "algo.beta=0.3"],
                          capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    assert "  algo.beta = 0.3  [default 0.1]" in proc.stdout and "  algo.weighting = sample  [sample | loss]" in proc.stdout
    _check_lists_every_key(proc.stdout, SCHEMAS["dpo_schema"])


def test_demo_help_from_the_command_line_lists_its_package_schema():
    """The demo's schema lives in demos/config.py; its entry point registers it before --help."""
    from demos.config import DemoRunConfig

    proc = subprocess.run([sys.executable, str(ROOT / "recipes" / "demo.py"), "--help", "seed=3"],
                          capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    assert "  seed = 3  [default 0]" in proc.stdout and "does not compose" not in proc.stdout
    _check_lists_every_key(proc.stdout, DemoRunConfig)
