"""The checks `hf_aux.tasks.validation.check_data_file` makes of a local data file before `datasets` reads it, on
the inputs for which datasets' own reading says nothing, or nothing that names the line (issue #62 kept them): if a
datasets release starts refusing one of these with the line, the first assertion fails and that check can go."""

import datasets
import pytest

from hf_aux.tasks import validation

LATIN1_LATE = ("sentence,label\n" + "ok,pos\n" * 5000 + "caf\u00e9,neg\n").encode("latin-1")  # 'é' at byte 35018
CASES = [  # (file name, content, what datasets does: None = loads it, else text its error lacks; our message)
    ("short.csv", b"a,b,c\ngood,pos,x\nbad,neg\n", None, "short.csv' line 3: 2 fields, the header has 3"),
    ("null.jsonl", b'{"a": 1}\nnull\n{"a": 3}\n', None, "null.jsonl' line 2 is a NoneType, not a JSON object"),
    ("blank.txt", b"\n \n\n", None, "blank.txt' holds no rows (only blank lines)"),
    ("late.csv", LATIN1_LATE, "35018", "late.csv' is not UTF-8 text (byte 35018, line 5002)"),
    ("cut.txt", b"ab\n\xc3", "position 3", "cut.txt' ends inside a UTF-8 character"),
]


@pytest.mark.parametrize("name, content, datasets_lacks, message", CASES, ids=[c[0] for c in CASES])
def test_a_bad_file_datasets_reads_or_names_without_its_line_is_refused_first(name, content, datasets_lacks, message,
                                                                             tmp_path, monkeypatch):
    monkeypatch.setenv("HF_DATASETS_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", tmp_path / "cache")
    path = tmp_path / name
    path.write_bytes(content)
    builder = validation.DATA_FILE_BUILDERS[path.suffix]
    if datasets_lacks is None:
        datasets.load_dataset(builder, data_files={"train": str(path)}, cache_dir=str(tmp_path / "cache"))
    else:
        with pytest.raises(Exception) as error:
            datasets.load_dataset(builder, data_files={"train": str(path)}, cache_dir=str(tmp_path / "cache"))
        cause = error.value.__cause__ or error.value
        assert isinstance(cause, UnicodeDecodeError) and datasets_lacks not in str(cause), cause
    with pytest.raises(ValueError, match="^w \\(train\\): .*" + message.replace("(", "\\(").replace(")", "\\)")):
        validation.load_data_files({"train": str(path)}, "w")
