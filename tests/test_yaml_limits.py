"""One YAML reader, with one set of limits, for scenario files and ``--set`` values
(kvsim/yaml_parse.py): nesting, duplicate keys, size and value count are refused the same way in
both, in one message naming the file (and line) or the ``--set`` argument, exit status 2, no
traceback; the size and value limits say how to raise them, and raising them works.

Large inputs are timed by ``benchmarks/bench_yaml_validate.py``, never here: the tests below
that guard linear validation count operations instead.
"""

from __future__ import annotations

import contextlib
import io

import pytest

import kvsim
from kvsim import yaml_parse
from kvsim.cli import main

SCENARIO = """\
name: limits
duration: 10 s
model: qwen3-8b
workload:
  arrival: {kind: poisson, rate: 1/s}
  input_tokens: {kind: fixed, value: 100}
  output_tokens: {kind: fixed, value: 10}
systems:
  a:
    node: h20-8x
    nodes: 1
    instance: {tp: 1}
"""


def _validate(*argv) -> tuple[int, list[str], str]:
    """``kvsim validate ARGV``: exit status, the problem lines (after "invalid input"), all of stderr."""
    err = io.StringIO()
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err):
        status = main(["validate", *map(str, argv)])
    text = err.getvalue()
    return status, [line.strip() for line in text.splitlines()[1:]], text


def _one_problem(status: int, problems: list[str], err: str) -> str:
    assert status == 2, err
    assert "Traceback" not in err
    assert len(problems) == 1, err
    return problems[0]


@pytest.fixture
def scenario_file(tmp_path):
    path = tmp_path / "s.yaml"
    path.write_text(SCENARIO, encoding="utf-8")
    return path


def _bomb(width: int, levels: int) -> str:
    """A flow list of ``width`` items, ``levels`` deep through aliases: width**levels values."""
    lines = [f"a0: &a0 [{', '.join(['1'] * width)}]"]
    for i in range(1, levels):
        lines.append(f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * width)}]")
    return "\n".join(lines) + "\n"


# --- --set: the limits of a file ---------------------------------------------------------------


@pytest.mark.parametrize("depth", [100, 5000])
def test_deep_nesting_in_a_set_value_is_one_message(scenario_file, depth):
    # 5,000 brackets raised RecursionError in the YAML loader (exit 3)
    value = "[" * depth + "]" * depth
    problem = _one_problem(*_validate(scenario_file, "--set", f"workload.extra={value}"))
    assert problem.startswith("--set workload.extra=[[[[") and "..." in problem
    assert problem.endswith("nested more than 64 levels deep (a scenario nests about 8)")
    assert len(problem) < 200  # the argument is cut, not quoted whole


def test_nesting_counts_the_set_field_path_as_a_file_would(scenario_file):
    # a value 10 deep at a field 60 deep is 70 levels from the top, as the same value in the file
    path = ".".join(["x"] * 60)
    value = "[" * 10 + "]" * 10
    problem = _one_problem(*_validate(scenario_file, "--set", f"{path}={value}"))
    assert problem.startswith("--set x.x.x.") and problem.endswith("nested more than 64 levels deep (a scenario "
                                                                   "nests about 8)")
    problem = _one_problem(*_validate(scenario_file, "--set", ".".join(["x"] * 5000) + "=1"))
    assert problem.endswith("the field path is nested more than 64 levels deep")


def test_deep_nesting_in_a_file_is_the_same_message(tmp_path):
    path = tmp_path / "deep.yaml"
    path.write_text(SCENARIO + "extra: " + "[" * 100_000 + "]" * 100_000 + "\n", encoding="utf-8")
    problem = _one_problem(*_validate(path))
    assert problem == f"{path}:13: nested more than 64 levels deep (a scenario nests about 8)"


def test_duplicate_keys_in_a_set_value_are_refused_as_in_a_file(scenario_file, tmp_path):
    # the file loader refused them; --set kept the last one silently
    problem = _one_problem(*_validate(scenario_file, "--set", "systems.a.instance={tp: 1, tp: 2}"))
    assert problem == "--set systems.a.instance={tp: 1, tp: 2}: systems.a.instance.tp: duplicate key"
    in_file = tmp_path / "dup.yaml"
    in_file.write_text(SCENARIO.replace("instance: {tp: 1}", "instance: {tp: 1, tp: 2}"), encoding="utf-8")
    problem = _one_problem(*_validate(in_file))
    assert problem == f"{in_file}:12: systems.a.instance.tp: duplicate key (first given on line 12)"


def test_too_many_values_in_a_set_value_are_refused(scenario_file):
    # 11**6 = 1.8 million values through aliases: the file's limit holds for --set too
    value = "[" + ", ".join(f"&a{i} [{', '.join(['1'] * 11 if i == 0 else [f'*a{i - 1}'] * 11)}]"
                            for i in range(6)) + "]"
    problem = _one_problem(*_validate(scenario_file, "--set", f"workload.input_tokens.values={value}"))
    assert problem.startswith("--set workload.input_tokens.values=[&a0 [1, 1,")
    assert "more than 1,000,000 keys, values and list items once aliases (*name) are expanded" in problem
    assert f"{yaml_parse.NODES_VARIABLE}=2000000" in problem


# --- files: size and value limits, before parsing in full -------------------------------------


def test_a_file_over_the_size_limit_is_refused_before_parsing(tmp_path, monkeypatch):
    path = tmp_path / "big.yaml"
    filler = "x" * (yaml_parse.MAX_BYTES - len(SCENARIO))
    path.write_text(SCENARIO + f"description: {filler}\n", encoding="utf-8")
    size = path.stat().st_size
    parsed = []
    monkeypatch.setattr(yaml_parse, "_Builder", lambda *a: parsed.append(a))  # nothing may be parsed
    problem = _one_problem(*_validate(path))
    assert parsed == []
    assert problem == (f"{path}: {size:,} bytes is more than kvsim reads as YAML (4,194,304 bytes; a scenario is a "
                       f"few KB, long lists belong in a length or trace file): is this the right file? To read it "
                       f"anyway, set the environment variable KVSIM_YAML_MAX_BYTES={size} or more (see "
                       f"docs/reference/scenario-files.md, YAML limits)")


def test_raising_the_size_limit_reads_the_file(tmp_path, monkeypatch):
    path = tmp_path / "big.yaml"
    path.write_text(SCENARIO + f"description: {'x' * yaml_parse.MAX_BYTES}\n", encoding="utf-8")
    assert _validate(path)[0] == 2
    monkeypatch.setenv("KVSIM_YAML_MAX_BYTES", str(path.stat().st_size))
    status, _, err = _validate(path)
    assert status == 0, err


def test_a_file_over_the_value_limit_is_refused_at_the_first_value_over(tmp_path, monkeypatch):
    path = tmp_path / "long.yaml"
    values = ", ".join(["100"] * 3000)
    text = SCENARIO.replace("input_tokens: {kind: fixed, value: 100}", f"input_tokens: {{kind: empirical, values: "
                                                                        f"[{values}]}}")
    path.write_text(text, encoding="utf-8")
    assert _validate(path)[0] == 0
    monkeypatch.setenv("KVSIM_YAML_MAX_NODES", "2000")
    problem = _one_problem(*_validate(path))
    assert problem == (f"{path}:6: more than 2,000 keys, values and list items once aliases (*name) are expanded "
                       f"(a scenario holds a few hundred): is this the right file? To read it anyway, set the "
                       f"environment variable KVSIM_YAML_MAX_NODES=4000 or more (see docs/reference/scenario-files.md, "
                       f"YAML limits)")
    monkeypatch.setenv("KVSIM_YAML_MAX_NODES", "4000")  # raising it reads the file
    status, _, err = _validate(path)
    assert status == 0, err


def test_the_value_limit_stops_reading_at_the_value_over_it(monkeypatch):
    # counted while parsing: the events after the first value over the limit are never read
    monkeypatch.setenv("KVSIM_YAML_MAX_NODES", "100")
    events = []
    for loader in yaml_parse._LOADERS:
        real = loader.get_event

        def counting(self, real=real):
            events.append(1)
            return real(self)

        monkeypatch.setattr(loader, "get_event", counting)
    text = "values: [" + ", ".join(["1"] * 100_000) + "]\n"
    with pytest.raises(kvsim.SpecError, match="more than 100 keys, values and list items"):
        kvsim.parse_scenario(text, "long.yaml")
    assert 100 < len(events) < 110


def test_the_default_value_limit_names_the_way_to_raise_it(tmp_path):
    path = tmp_path / "bomb.yaml"
    path.write_text(_bomb(9, 9), encoding="utf-8")  # 751 bytes, 9**9 values
    problem = _one_problem(*_validate(path))
    assert problem.startswith(f"{path}:7: more than 1,000,000 keys, values and list items once aliases (*name) are "
                              f"expanded")
    assert problem.endswith("set the environment variable KVSIM_YAML_MAX_NODES=2000000 or more (see "
                            "docs/reference/scenario-files.md, YAML limits)")


@pytest.mark.parametrize("variable", ["KVSIM_YAML_MAX_BYTES", "KVSIM_YAML_MAX_NODES"])
@pytest.mark.parametrize("value", ["lots", "0", "-5", "1.5"])
def test_a_bad_limit_in_the_environment_is_named(scenario_file, monkeypatch, variable, value):
    monkeypatch.setenv(variable, value)
    problem = _one_problem(*_validate(scenario_file))
    assert problem.startswith(f"{variable}={value!r}: give the most ")
    assert "as a whole number (the default is" in problem


# --- linear validation: operations counted, not timed ------------------------------------------


def test_unknown_keys_word_only_the_problems_shown(monkeypatch):
    # each of 2,000 unknown keys was matched against every allowed field for "did you mean"
    # (twice), though six problems are shown: 200,000 keys took 30 CPU-seconds
    import kvsim.yaml_io as yaml_io

    calls = []
    real = yaml_io.did_you_mean
    monkeypatch.setattr(yaml_io, "did_you_mean", lambda *a: calls.append(1) or real(*a))
    text = SCENARIO + "".join(f"key{i}: {i}\n" for i in range(2000))
    with pytest.raises(kvsim.SpecError) as caught:
        kvsim.parse_scenario(text, "keys.yaml")
    problems = caught.value.problems
    assert len(problems) == 7 and problems[-1] == "... and 1994 more problem(s)"
    assert problems[0].startswith("keys.yaml:13: key0: unknown field; fields allowed here: name, description,")
    assert len(calls) == 6


def test_a_misspelt_field_still_explains_the_missing_one():
    # the cheaper test for "does an unknown key explain a missing one" gives the same answer
    text = SCENARIO.replace("duration: 10 s", "duraton: 10 s") + "".join(f"key{i}: {i}\n" for i in range(50))
    with pytest.raises(kvsim.SpecError) as caught:
        kvsim.parse_scenario(text, "m.yaml")
    problems = caught.value.problems
    assert problems[0] == ("m.yaml:2: duraton: unknown field (did you mean 'duration'?); fields allowed here: "
                           + problems[0].split("fields allowed here: ")[1])
    assert not any("duration: required field is missing" in p for p in problems)
    assert problems[-1] == "... and 45 more problem(s)"


def test_a_sweep_point_setting_many_fields_copies_the_scenario_once(monkeypatch):
    # each field a point sets deep-copied the whole scenario: quadratic in the fields (a sweep of
    # 10,000 catalog fields took 400 CPU-seconds)
    import copy

    copies = []
    real_deepcopy = copy.deepcopy

    def counting(value, *rest):
        if isinstance(value, dict) and "systems" in value:
            copies.append(1)  # the whole scenario (copy's own recursion only sees its parts)
        return real_deepcopy(value, *rest)

    monkeypatch.setattr(copy, "deepcopy", counting)
    n = 200
    text = (SCENARIO + "catalog:\n  models:\n" + "".join(f"    m{i}: {{base: qwen3-8b}}\n" for i in range(n))
            + "sweep:\n" + "".join(f"  catalog.models.m{i}.base: [qwen3-8b]\n" for i in range(n)))
    scenario = kvsim.parse_scenario(text, "sweep.yaml")
    assert len(scenario.points) == 1 and len(scenario.points[0].params) == n
    assert len(copies) == 2  # once for the point's catalogs, once for its spec


def test_many_problems_at_one_sweep_point_label_it_once(monkeypatch):
    # the point's label (every field it sets) was built for each of its problems, and the sweep
    # keys scanned for each: quadratic in the fields
    import kvsim.scenario.problems as problems_module

    labels = []
    real = problems_module.point_label
    monkeypatch.setattr(problems_module, "point_label", lambda params: labels.append(1) or real(params))
    n = 300
    text = (SCENARIO + "catalog:\n  models:\n" + "".join(f"    m{i}: {{base: qwen3-8b}}\n" for i in range(n))
            + "sweep:\n" + "".join(f"  catalog.models.m{i}.base: [nope-{i}]\n" for i in range(n)))
    with pytest.raises(kvsim.SpecError) as caught:
        kvsim.parse_scenario(text, "sweep.yaml")
    problems = caught.value.problems
    assert len(labels) == 1
    assert problems[0].startswith("sweep.yaml:316: sweep.catalog.models.m0.base: at sweep point "
                                  "[catalog.models.m0.base=nope-0, catalog.models.m1.base=nope-1,")
    assert "... (29" in problems[0] and "more)]: catalog.models.m0.base: unknown model 'nope-0'" in problems[0]
    assert problems[1].startswith("sweep.yaml:317: sweep.catalog.models.m1.base: ")
    assert problems[-1] == f"... and {n - 12} more problem(s)"


# --- without libyaml: the pure-Python parser gives the same data and messages ------------------


@pytest.mark.parametrize("text", [
    "a: 1\nb: [1, 2, {c: d}]\nc: 'x'\nd: 012\ne: 0x1f\nf: 1.5e3\ng: ~\nh: True\ni: yes\nj: 2020-01-01\nk: !!str 1\n",
    "base: &b {x: 1, y: [2, 3]}\nk:\n  <<: *b\n  y: 4\nl: [*b, *b]\n",
    "a: 1\na: 2\n",
    "a: " + "[" * 100 + "]" * 100 + "\n",
    "a: !!python/object:os.system 1\n",
    "a: [\n",
    "a: *nowhere\n",
    "values: [" + ", ".join(["1"] * 200) + "]\n",
    f"a: {'1' * 308}\nb: {'1' * 309}\nc: {'1' * 5000}\nd: -{'1' * 5000}\ne: 0x{'f' * 300}\n",
])
def test_without_libyaml_the_same_data_and_messages(monkeypatch, text):
    monkeypatch.setenv("KVSIM_YAML_MAX_NODES", "150")
    usual = yaml_parse._LOADERS  # libyaml first, where PyYAML has it

    def read(loaders):
        monkeypatch.setattr(yaml_parse, "_LOADERS", loaders)
        try:
            return yaml_parse.parse_yaml(text, yaml_parse.Source("f.yaml"))
        except yaml_parse.YamlRefused as exc:
            return exc.problems

    assert read((yaml_parse.KvsimLoader,)) == read(usual)


def test_an_undecodable_byte_in_a_set_value_is_one_message(scenario_file):
    # a byte that is not UTF-8 reaches sys.argv as a lone surrogate, which libyaml cannot take
    problem = _one_problem(*_validate(scenario_file, "--set", "name=\udcff"))
    assert problem == ("--set name=\udcff: the value is not valid YAML: contains a character YAML does not allow "
                       "(#xdcff); remove it or quote it")


# --- whole numbers beyond a float's range: out of range, as an infinite float is ---------------

_HUGE = {
    "5000 digits": "1" * 5000,  # over Python's 4,300-digit limit: int() raised ValueError (exit 3)
    "negative": "-" + "1" * 5000,
    "with separators": "1_" + "1" * 5000,
    "tagged": "!!int " + "1" * 5000,
    "400 digits": "1" * 400,  # past a float: 'int too large to convert to float' (exit 3) at nodes
    "hexadecimal": "0x" + "f" * 4000,
    "base 60": "1" + ":0" * 2500,
}


def _shown(value: str) -> str:
    text = value.removeprefix("!!int ")
    return text if len(text) <= 40 else f"{text[:24]}... ({len(text):,} characters)"


@pytest.mark.parametrize("field", ["seed", "systems.a.nodes", "replications"])
@pytest.mark.parametrize("name", list(_HUGE))
def test_a_whole_number_beyond_a_float_is_out_of_range_in_a_set_value(scenario_file, field, name):
    value = _HUGE[name]
    problem = _one_problem(*_validate(scenario_file, "--set", f"{field}={value}"))
    assert problem.startswith(f"--set {field}={value[:20]}")
    assert problem.endswith(f"...: {field}: the whole number {_shown(value)} is out of range: kvsim reads numbers "
                            f"up to about 1.8e308 (a float's range)")


@pytest.mark.parametrize("name", list(_HUGE))
def test_a_whole_number_beyond_a_float_is_out_of_range_in_a_file(tmp_path, name):
    path = tmp_path / "huge.yaml"
    value = _HUGE[name]
    path.write_text(SCENARIO.replace("nodes: 1", f"nodes: {value}") + f"seed: {value}\n", encoding="utf-8")
    status, problems, err = _validate(path)
    assert status == 2 and "Traceback" not in err, err
    tail = f"the whole number {_shown(value)} is out of range: kvsim reads numbers up to about 1.8e308 (a float's range)"
    assert problems == [f"{path}:11: systems.a.nodes: {tail}", f"{path}:13: seed: {tail}"]


def test_a_key_beyond_a_float_names_its_mapping(tmp_path):
    path = tmp_path / "key.yaml"
    path.write_text(SCENARIO + "extra:\n  " + "1" * 500 + ": 1\n", encoding="utf-8")
    problem = _one_problem(*_validate(path))
    assert problem == (f"{path}:14: extra: the whole number 111111111111111111111111... (500 characters) is out of "
                       f"range: kvsim reads numbers up to about 1.8e308 (a float's range)")


def test_the_largest_whole_numbers_are_read():
    largest = int(yaml_parse.LARGEST_WHOLE)
    text = f"a: {10**308 - 1}\nb: {largest}\nc: -{largest}\nd: 0x{largest:x}\ne: {'0' * 5000}1\n"
    data, _ = yaml_parse.parse_yaml(text, yaml_parse.Source("f.yaml"))
    assert data == {"a": 10**308 - 1, "b": largest, "c": -largest, "d": largest, "e": 1}  # e: octal, 5,000 zeros
    with pytest.raises(yaml_parse.YamlRefused, match="the whole number 179769313486231570814527... "):
        yaml_parse.parse_yaml(f"a: {largest + 1}\n", yaml_parse.Source("f.yaml"))


@pytest.mark.parametrize("value", ["1" + "0" * 5000 + ".0", "-1" + "0" * 5000 + ".0", "1.0e+99999", "1e99999"])
@pytest.mark.parametrize("field", ["seed", "systems.a.nodes", "workload.input_tokens.value"])
def test_a_float_of_thousands_of_digits_is_one_message(scenario_file, tmp_path, field, value):
    # an infinite float is refused by the field (checked with the fix for the whole numbers above)
    problem = _one_problem(*_validate(scenario_file, "--set", f"{field}={value}"))
    assert problem.startswith(f"--set {field}={value[:20]}") and f": {field}: " in problem
    assert len(problem) < 300
    path = tmp_path / "float.yaml"
    path.write_text(SCENARIO + f"seed: {value}\n", encoding="utf-8")
    problem = _one_problem(*_validate(path))
    assert problem.startswith(f"{path}:13: seed: ") and len(problem) < 300


@pytest.mark.parametrize("value, tag", [("!!int", "int"), ("!!int ''", "int"), ("!!int +", "int"), ("!!float", "float"),
                                        ("!!float ''", "float"), ("!!timestamp", "timestamp"),
                                        ("!!timestamp 99999-01-01", "timestamp"), ("!!bool maybe", "bool")])
def test_a_tagged_value_its_tag_cannot_read_is_one_message(scenario_file, tmp_path, value, tag):
    # !!int or !!float with no digits raised IndexError, !!timestamp of no date AttributeError (exit 3)
    text = value.split(" ", 1)[1] if " " in value else ""
    tail = f"seed: a value YAML cannot read: {text.strip(chr(39))!r} is not a value of the tag !!{tag}"
    problem = _one_problem(*_validate(scenario_file, "--set", f"seed={value}"))
    assert problem == f"--set seed={value}: {tail}"
    path = tmp_path / "tagged.yaml"
    path.write_text(SCENARIO + f"seed: {value}\n", encoding="utf-8")
    assert _one_problem(*_validate(path)) == f"{path}:13: {tail}"


# --- aliases: their lines recorded once, not once per expansion --------------------------------


def _deep_aliases(width: int = 17_500, levels: int = 55) -> str:
    """A list of ``width`` numbers, then ``levels`` anchors each holding an alias of the one
    before: about 53 KB, nested 57 deep, 980,000 values with the aliases expanded (within the
    1,000,000 limit)."""
    lines = [f"a0: &a0 [{', '.join(['1'] * width)}]"]
    lines += [f"a{i}: &a{i} [*a{i - 1}]" for i in range(1, levels + 1)]
    return "\n".join(lines) + "\n"


def test_an_alias_records_its_lines_once():
    # every alias copied its anchor's lines under its own path: 981,597 entries with path tuples up
    # to 57 long, 500 MB of resident memory for a 53 KB file (measured with a kvsim validate
    # subprocess; 135 MB after, as for a one-line file)
    data, lines = yaml_parse.parse_yaml(_deep_aliases(), yaml_parse.Source("deep.yaml"))
    assert len(data) == 56
    assert len(lines) == 1 + 56 + 17_500 + 55  # the document, the keys, the numbers, each alias's list item
    assert len(lines.aliases) == 55


ALIASED = """\
a: &a
  p: 1
  q:
    - r
    - s: 2
b: &b
  one: *a
  two: [*a, 3]
c: &c [*b, *b, {d: *a}]
d:
  e: *c
  f: [*c]
m:
  <<: *a
  p: 4
"""


@pytest.mark.parametrize("path, line", [
    (("b", "one"), 7), (("b", "one", "q", 1, "s"), 5), (("b", "two", 0, "p"), 2), (("b", "two", 1), 8),
    (("c", 1, "two", 0, "q", 0), 4), (("c", 2, "d", "q"), 3), (("d", "e", 0, "one", "q", 1, "s"), 5),
    (("d", "f", 0, 2, "d", "p"), 2), (("d", "f", 0, 2, "d", "nothing", "here"), 9), (("d", "e", 5), 11),
    (("m", "<<", "q", 1), 5), (("m", "q"), 13), (("m", "p"), 15), (("nowhere",), 1),
])
def test_a_field_inside_an_alias_names_the_line_that_wrote_it(path, line):
    from kvsim.yaml_io import load_yaml

    located = load_yaml(ALIASED, "f.yaml")
    assert located.line_of(path) == line


def test_a_problem_inside_an_aliased_value_names_the_anchors_line(tmp_path):
    path = tmp_path / "aliased.yaml"
    text = SCENARIO.replace("  a:\n    node: h20-8x\n    nodes: 1\n    instance: {tp: 1}\n",
                            "  a: &a\n    node: h20-8x\n    nodes: 1\n    instance: {tp: 0}\n  b: *a\n")
    path.write_text(text, encoding="utf-8")
    status, problems, err = _validate(path)
    assert status == 2, err
    assert f"{path}:12: systems.b.instance.tp: " in err and f"{path}:12: systems.a.instance.tp: " in err


@pytest.mark.parametrize("argument", ["systems.s.²=1", "systems.s." + "1" * 5000 + "=1"])
def test_a_set_path_part_that_is_no_plain_index_is_a_key(scenario_file, argument):
    """``²`` is a digit to ``str.isdigit`` and 5,000 digits exceed ``int()``: both were read as a
    list index (exit 2 in Python's words); they are keys, refused as unknown fields."""
    problem = _one_problem(*_validate(str(scenario_file), "--set", argument))
    assert "invalid literal" not in problem and "Exceeds the limit" not in problem and len(problem) <= 600
    assert "unknown field" in problem or problem.endswith("characters in all)")  # the long one is cut


def test_a_problem_line_is_cut_to_a_readable_length(scenario_file):
    status, problems, err = _validate(str(scenario_file), "--set", 'seed="' + "1" * 5000 + '"')
    assert status == 2 and len(problems) == 1
    assert len(problems[0]) <= 600 and problems[0].endswith("characters in all)") and "seed" in problems[0]
