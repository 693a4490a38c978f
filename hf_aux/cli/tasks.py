"""`hf-aux tasks`: the task registry (hf_aux.tasks.registry) on the command line.

    hf-aux tasks                                  the ready tasks, one line each: name, kind, dataset[/config]
    hf-aux tasks --all                            every task; those that are not ready with the reason
    hf-aux tasks glue/rte                         one definition, as a one-task mixture file (YAML) to paste
    hf-aux tasks --search nli                     the tasks whose name, kind, dataset or description holds a word
    hf-aux tasks --download mixture.yaml          every task of a mixture loaded into the datasets cache
    hf-aux tasks --citation                       the BibTeX of the registry's sources

`--download` loads each task of the mixture the way training will (`hf_aux.tasks.loading.load_mixture`, then
`load_task_splits`), so the datasets cache (`HF_DATASETS_CACHE`) then holds everything an air-gapped run of the
same mixture reads with `HF_DATASETS_OFFLINE=1`.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence


def make_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="hf-aux tasks", allow_abbrev=False,
        description="List the task registry, show one task's definition, or pre-download the data of a mixture file "
                    "into the datasets cache (HF_DATASETS_CACHE).")
    parser.add_argument("name", nargs="?", help="a registry task (e.g. glue/rte): print its definition as YAML")
    parser.add_argument("--search", metavar="WORD", help="list only the tasks whose name, kind, dataset or "
                        "description holds WORD (case ignored; several words: all of them)")
    parser.add_argument("--all", action="store_true", help="also list the tasks that are not ready, with the reason")
    parser.add_argument("--download", metavar="MIXTURE", help="a mixture file (YAML/JSON): load every task's data "
                        "into the datasets cache, as training will read it")
    parser.add_argument("--seed", type=int, default=42, help="with --download: the seed of carved validation splits")
    parser.add_argument("--citation", action="store_true", help="print the BibTeX of the registry's sources")
    return parser


def main(argv: Sequence[str] | None = None) -> None:
    args = make_parser().parse_args(list(sys.argv[1:] if argv is None else argv))
    given = [flag for flag, value in (("name", args.name), ("--download", args.download),
                                      ("--citation", args.citation), ("--search", args.search)) if value]
    if len(given) > 1:
        print(f"hf-aux tasks: error: give one of {' / '.join(given)}, not several", file=sys.stderr)
        raise SystemExit(2)
    from ..tasks import registry as task_registry

    try:
        if args.download:
            download(args.download, args.seed)
        elif args.citation:
            print(task_registry.citations())
        elif args.name:
            print(task_registry.describe(args.name), end="")
        else:
            found = task_registry.listing(include_not_ready=args.all, search=args.search or None)
            if args.search and not found:
                print(f"hf-aux tasks: no {'' if args.all else 'ready '}task matches {args.search!r} (searched: names, "
                      "kinds, datasets, descriptions)" + ("" if args.all else "; --all searches every task"),
                      file=sys.stderr)
                raise SystemExit(1)
            print("\n".join(found))
    except ValueError as error:  # a user's mistake: one line naming the task, field or file
        print(f"hf-aux tasks: error: {error}", file=sys.stderr)
        raise SystemExit(2) from None


def download(mixture: str, seed: int = 42) -> None:
    """Load every task of `mixture` (train / validation / test as training reads them) into the datasets cache,
    printing one line per task and the cache folder."""
    import datasets

    from ..tasks.loading import load_mixture, load_task_splits

    tasks = load_mixture(mixture)
    for task in tasks:
        splits = load_task_splits(task, seed=seed)
        source = task.dataset_name or task.data_files or "in-memory data (a demo task)"
        rows = ", ".join(f"{split} {len(rows)}" for split, rows in splits.items())
        print(f"{task.name}: {rows} rows ({source})", flush=True)
    print(f"{len(tasks)} tasks of {mixture} are in the datasets cache {datasets.config.HF_DATASETS_CACHE}")
