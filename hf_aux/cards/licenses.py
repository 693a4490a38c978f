"""The licence identifiers the Hugging Face Hub accepts in a card's `license:` field, and the check of a licence a
user gives (`--license`, `--license_name`) against them.

Source: the Hub's documentation, "Licenses" (https://huggingface.co/docs/hub/repositories-licenses; the table in
huggingface/hub-docs, docs/hub/repositories-licenses.md, commit 008d54d), plus the Llama 3.x / 4 identifiers the
Hub added later (the ones Meta's repositories declare). A licence not listed is given as `other` with its name in
`license_name`, as that page documents. Nothing here imports more than the standard library: the command line
checks its arguments with it before anything is loaded.
"""

from __future__ import annotations

import difflib

HUB_LICENSES_URL = "https://huggingface.co/docs/hub/repositories-licenses"
HUB_LICENSES = (
    "apache-2.0", "mit", "openrail", "bigscience-openrail-m", "creativeml-openrail-m", "bigscience-bloom-rail-1.0",
    "bigcode-openrail-m", "afl-3.0", "artistic-2.0", "bsl-1.0", "bsd", "bsd-2-clause", "bsd-3-clause",
    "bsd-3-clause-clear", "c-uda", "cc", "cc0-1.0", "cc-by-2.0", "cc-by-2.5", "cc-by-3.0", "cc-by-4.0",
    "cc-by-sa-3.0", "cc-by-sa-4.0", "cc-by-nc-2.0", "cc-by-nc-3.0", "cc-by-nc-4.0", "cc-by-nd-4.0",
    "cc-by-nc-nd-3.0", "cc-by-nc-nd-4.0", "cc-by-nc-sa-2.0", "cc-by-nc-sa-3.0", "cc-by-nc-sa-4.0",
    "cdla-sharing-1.0", "cdla-permissive-1.0", "cdla-permissive-2.0", "wtfpl", "ecl-2.0", "epl-1.0", "epl-2.0",
    "etalab-2.0", "eupl-1.1", "agpl-3.0", "gfdl", "gpl", "gpl-2.0", "gpl-3.0", "lgpl", "lgpl-2.1", "lgpl-3.0", "isc",
    "lppl-1.3c", "ms-pl", "mpl-2.0", "odc-by", "odbl", "openrail++", "osl-3.0", "postgresql", "ofl-1.1", "ncsa",
    "unlicense", "zlib", "pddl", "lgpl-lr", "deepfloyd-if-license", "llama2", "gemma", "unknown", "other",
    # added to the Hub's list after that commit
    "llama3", "llama3.1", "llama3.2", "llama3.3", "llama4",
)


def license_problem(license: str | None, license_name: str | None = None) -> str | None:  # noqa: A002
    """Why `license` (with `license_name`) cannot go into a Hub card, or None when it can: `license` must be one of
    HUB_LICENSES (exactly: the Hub's identifiers are lower case); `other` needs `license_name` (the licence's own
    name, e.g. "my-lab-research-licence"), and `license_name` goes only with `other`."""
    if license is None:
        return "--license_name goes with --license other (a licence the Hub does not list)" if license_name else None
    if license not in HUB_LICENSES:
        close = difflib.get_close_matches(license.lower(), HUB_LICENSES, n=3, cutoff=0.6)
        hint = f" (closest: {', '.join(close)})" if close else ""
        return (f"{license!r} is not a licence identifier the Hub accepts{hint}; give one of its identifiers, in "
                f"lower case (apache-2.0, mit, cc-by-4.0, ...: {HUB_LICENSES_URL}), or --license other with "
                "--license_name <the licence's name>")
    if license == "other" and not (license_name or "").strip():
        return "'other' needs --license_name <the licence's name> (the Hub shows it; add the licence's text as LICENSE)"
    if license != "other" and license_name:
        return f"--license_name names a licence the Hub does not list, with --license other; {license!r} is listed"
    return None
