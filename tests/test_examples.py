"""Examples are tests (issue 32): every example prompt the README, the `--help` texts and the chat
banner show for the embedded model is listed in unmask.examples with its answer, and the shipped
model gives that answer, with the settings written beside the prompt."""

import re
from dataclasses import fields
from pathlib import Path

import pytest
from click.testing import CliRunner

import unmask
from unmask import GenerationConfig
from unmask.cli import cli
from unmask.cli.cmd_chat import banner
from unmask.examples import SKILLS, all_examples, examples_text, package_skills, skills_for
from unmask.evaluate import read_task_spec
from unmask.model import default_package_dir

ROOT = Path(__file__).resolve().parents[1]
SETTINGS = {f.name for f in fields(GenerationConfig)}
# one prompt per hit: a CLI prompt, a piped prompt, a Python call, an HTTP message
PROMPT_PATTERNS = (
    re.compile(r"""-p\s+"([^"]+)\""""),
    re.compile(r"""echo\s+"([^"]+)"\s*\|\s*unmask"""),
    re.compile(r"""\.(?:generate|stream|send)\(\s*"([^"]+)\""""),
    re.compile(r""""content":\s*"([^"]+)\""""),
)
CONVERSATION = re.compile(r"""printf\s+'([^']+)'\s*\|\s*unmask chat""")
OTHER_MODEL = re.compile(r"unmask (?:generate|chat|serve)\s+(?!-)(\S+)")  # a MODEL argument: not the embedded one
SETTING_PATTERNS = (re.compile(r"""\b(\w+)=([0-9.]+)"""), re.compile(r""""(\w+)":\s*([0-9.]+)"""),
                    re.compile(r"""--([a-z][a-z-]*)\s+([0-9.]+)"""))


def line_settings(line: str) -> dict:
    """GenerationConfig settings written on the line (Python keywords, JSON fields, CLI flags)."""
    found = {}
    for pattern in SETTING_PATTERNS:
        for name, value in pattern.findall(line):
            name = name.replace("-", "_")
            if name in SETTINGS:
                found[name] = float(value) if "." in value else int(value)
    return found


def doc_examples(text: str, where: str):
    """(where, prompt or conversation turns, settings) for each example aimed at the embedded model."""
    for line in text.splitlines():
        if OTHER_MODEL.search(line):
            continue
        for match in CONVERSATION.finditer(line):
            yield where, tuple(t for t in match.group(1).split("\\n") if t), line_settings(line)
        for pattern in PROMPT_PATTERNS:
            for prompt in pattern.findall(line):
                yield where, prompt, line_settings(line)


def help_texts():
    runner = CliRunner()
    yield "unmask --help", runner.invoke(cli, ["--help"]).output
    for name in sorted(cli.list_commands(None)):
        yield f"unmask {name} --help", runner.invoke(cli, [name, "--help"]).output


@pytest.fixture(scope="module")
def model():
    return unmask.load(threads=1)


def documented():
    found = list(doc_examples((ROOT / "README.md").read_text(encoding="utf-8"), "README.md"))
    for where, text in help_texts():
        found += doc_examples(text, where)
    return found


DOCUMENTED = documented()


def turns(prompt):
    """The questions of a documented example: one prompt, or a piped chat's lines without its commands."""
    return [t for t in prompt if not t.startswith("/")] if isinstance(prompt, tuple) else [prompt]


class TestRegistry:
    def test_every_family_of_the_embedded_model_has_examples(self):
        table = all_examples()
        assert len(table) >= 12
        assert [skill.family for skill in SKILLS] == list(read_task_spec(default_package_dir()).families)
        assert all(len(skill.examples) >= 1 for skill in SKILLS)

    def test_docs_show_examples_and_each_is_listed_with_its_answer(self):
        assert len(DOCUMENTED) >= 8  # README, generate/chat/serve --help, the top-level --help
        assert {where for where, _, _ in DOCUMENTED} >= {"README.md", "unmask --help", "unmask generate --help",
                                                         "unmask chat --help", "unmask serve --help"}
        table = all_examples()
        for where, prompt, _ in DOCUMENTED:
            for turn in turns(prompt):
                assert turn in table, f"{where}: {turn!r} is not in unmask.examples with the answer it implies"

    def test_readme_lists_each_skill_with_example_phrasings(self):
        readme = (ROOT / "README.md").read_text(encoding="utf-8")
        for skill in SKILLS:
            shown = ", ".join("`" + ex.prompt.replace("\n", "\\n") + "`" for ex in skill.examples[:2])
            assert f"| {skill.name} | {skill.covers} | {shown} |" in readme, skill.name

    def test_other_models_examples_are_not_collected(self):
        text = 'unmask generate tiny -p "Hello"\nunmask generate -p "What is 2+2?" --threshold 0.9\n'
        assert list(doc_examples(text, "t")) == [("t", "What is 2+2?", {"threshold": 0.9})]

    def test_skills_follow_the_declared_families(self, tmp_path):
        assert [s.family for s in skills_for(("list", "tool_call"))] == ["tool_call", "list"]
        assert package_skills(tmp_path) == ()  # no tasks.json: no examples
        assert "no tasks.json" in examples_text(())


class TestShippedModel:
    @pytest.mark.parametrize("prompt, answer", sorted(all_examples().items()))
    def test_listed_example(self, model, prompt, answer):
        assert model.generate(prompt).text == answer

    @pytest.mark.parametrize("where, prompt, settings", [d for d in DOCUMENTED if not isinstance(d[1], tuple)],
                             ids=lambda v: v if isinstance(v, str) else None)
    def test_documented_prompt_with_its_settings(self, model, where, prompt, settings):
        assert model.generate(prompt, **settings).text == all_examples()[prompt], where

    @pytest.mark.parametrize("where, talk, settings", [d for d in DOCUMENTED if isinstance(d[1], tuple)],
                             ids=lambda v: v if isinstance(v, str) else None)
    def test_documented_chat_turn_by_turn(self, model, where, talk, settings):
        """A piped chat: each line a turn after the ones before it; /reset starts over."""
        chat, table = model.chat(**settings), all_examples()
        for turn in talk:
            if turn == "/reset":
                chat.reset()
            else:
                assert chat.send(turn).text == table[turn], f"{where}: {turn!r}"

    def test_banner_and_examples_command(self, model):
        lines = banner(model, model.resolve_config())
        assert package_skills(model.package.folder) == SKILLS
        assert "it does tool calls, math, lists, units, texts; /examples shows how to ask" in lines
        result = CliRunner().invoke(cli, ["chat"], input="/examples\n")
        assert result.exit_code == 0
        for skill in SKILLS:
            assert f"{skill.name}: {skill.covers}" in result.output
            assert skill.examples[0].prompt.splitlines()[0] in result.output

    def test_a_text_example_typed_as_examples_shows_it(self):
        """/examples shows a prompt of several lines between triple-quote lines: typed so, it is answered."""
        example = next(ex for skill in SKILLS for ex in skill.examples if "\n" in ex.prompt)
        shown = examples_text(SKILLS).splitlines()
        start = shown.index("  " + example.prompt.splitlines()[0]) - 1
        typed = [line[2:] for line in shown[start:start + example.prompt.count("\n") + 3]]
        result = CliRunner().invoke(cli, ["chat", "--no-stream"], input="\n".join(typed) + "\n")
        assert result.exit_code == 0 and result.stdout.strip() == example.answer, result.output

    def test_a_typical_question_commits_several_tokens_per_forward(self, model):
        """Parallel decoding is on by default (issue 32): /stats after a question shows it."""
        result = CliRunner().invoke(cli, ["chat"], input="Set a timer for 5 minutes.\n/stats\n")
        assert result.exit_code == 0
        per_forward = float(re.search(r"tokens per forward ([0-9.]+)", result.output).group(1))
        assert per_forward >= 4, result.output
        assert model.resolve_config().threshold is not None
