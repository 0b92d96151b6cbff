"""Which files a ``dgno deblur`` batch restores and where each goes (``dgno.inference.deblur``).

Folders expand to their images, each file once; what a folder holds besides images is counted for the
batch's summary (:class:`Ignored`), so a user sees that a subfolder was not searched; each input gets
one output name that is neither an input file nor another input's output.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from dgno.inference.image_files import converted_name, may_convert
from dgno.io import IMAGE_SUFFIXES, is_hidden, visible_files


@dataclass
class Ignored:
    """What the input folders held besides images, counted for the summary: hidden files, other files, subfolders."""

    hidden: int = 0
    other: int = 0
    subfolders: int = 0

    def text(self) -> str:
        """"1 hidden file(s), 2 non-image file(s) and 1 subfolder(s) ignored in the input folders", or ""."""
        kinds = [f"{n} {what}" for n, what in ((self.hidden, "hidden file(s)"), (self.other, "non-image file(s)"), (self.subfolders, "subfolder(s)")) if n]
        if not kinds:
            return ""
        listing = kinds[0] if len(kinds) == 1 else f"{', '.join(kinds[:-1])} and {kinds[-1]}"
        return f"{listing} ignored in the input folders" + (" (subfolders are not searched: pass them as inputs)" if self.subfolders else "")


def expand_inputs(inputs: Sequence[str | Path]) -> tuple[list[Path], list[tuple[Path, str]], Ignored, list[str]]:
    """(image files, failures, what the folders held besides images, notes): folders expand to their images, each file once.

    A file reached twice (named twice, or through a link) is restored once, with a note; a broken
    link in a folder is that link's failure.
    """
    files: list[Path] = []
    failures: list[tuple[Path, str]] = []
    ignored = Ignored()
    for raw in inputs:
        path = Path(raw)
        if path.is_dir():
            found, skipped = visible_files(path)
            ignored.hidden += len(skipped)
            count_others(path, ignored)
            files += found
            failures += [(link, f"{link}: a link to {link.readlink()}, which does not exist. Fix: remove the link or restore its target") for link in broken_links(path)]
            if not found:
                failures.append((path, f"{path}: a folder without images ({', '.join(IMAGE_SUFFIXES)}). Fix: pass the folder that holds the images, or the files"))
        elif not path.exists():
            failures.append((path, f"{path}: file does not exist. Fix: check the path"))
        else:
            files.append(path)
    first: dict[Path, Path] = {}
    unique, notes = [], []
    for p in files:
        key = p.resolve()
        if key in first:
            if p != first[key]:
                notes.append(f"note: {p}: the same file as {first[key]}; restored once")
            continue
        first[key] = p
        unique.append(p)
    return unique, failures, ignored, notes


def count_others(folder: Path, ignored: Ignored) -> None:
    """Count the visible entries of ``folder`` that are neither images nor links to nothing: other files and subfolders."""
    for entry in folder.iterdir():
        if is_hidden(Path(entry.name)) or (entry.suffix.lower() in IMAGE_SUFFIXES and entry.is_file()):
            continue
        if entry.is_dir():
            ignored.subfolders += 1
        elif entry.is_file():
            ignored.other += 1


def broken_links(folder: Path) -> list[Path]:
    return sorted(p for p in folder.iterdir() if p.is_symlink() and not p.exists() and p.suffix.lower() in IMAGE_SUFFIXES)


def output_paths(inputs: Sequence[Path], output_dir: Path) -> tuple[dict[Path, Path], list[tuple[Path, str]]]:
    """({input: output_dir/<name>}, refusals): never an output onto an input file, never two inputs onto one output.

    An output folder that is the input folder would replace ``a.tif`` by its restoration, and two
    folders may both hold an ``a.tif``: those inputs are refused, by name, before any work. A PNG or
    JPEG input claims its converted name too (:func:`converted_name`), which it is written under when
    its pixel type needs TIFF.
    """
    resolved_inputs = {p.resolve(): p for p in inputs}
    targets: dict[Path, Path] = {}
    claimed: dict[Path, Path] = {}
    refusals = []
    for path in inputs:
        out = output_dir / path.name
        names = [out, *([output_dir / converted_name(path)] if may_convert(path) else [])]
        keys = [n.resolve() for n in names]
        overwritten = next((k for k in keys if k in resolved_inputs), None)
        taken = next((k for k in keys if k in claimed), None)
        if overwritten is not None:
            refusals.append((path, f"{path}: its output {out} would overwrite the input file {resolved_inputs[overwritten]}. Fix: choose another --output folder"))
        elif taken is not None:
            refusals.append((path, f"{path}: its output {taken} is also the output of {claimed[taken]} (same name). Fix: rename one of them or restore them separately"))
        else:
            claimed |= dict.fromkeys(keys, path)
            targets[path] = out
    return targets, refusals


def written_before(path: Path, target: Path) -> bool:
    """Whether ``path``'s output is already in the output folder, under its own or its converted name (a file, not a folder)."""
    return target.is_file() or (may_convert(path) and target.with_name(converted_name(path)).is_file())
