"""The run file of a deployment certification: one JSON object per line, appended as each sample
arrives, so that a stopped run loses nothing and ``--resume FILE`` continues it.

Line 1 is the header: ``{"kind": "header", "version": …, "plan": {…}}`` — what must not change
between the run and its resumption (model, temperature, tokens per sample, k, the prompts' ids,
the seed, the reference, the number of samples asked).  Then one line per event:

- ``{"kind": "sample", "i": …, "seed": …, "prompt": …, "tokens": […], "reported": […] | null,
  "raw": […] | null, "short": …, "records": […]}``: sample i, its engine seed, its prompt's index,
  the engine's tokens and reported log-probabilities, the reference's raw log-probabilities and
  per-token records (``oracle.sequence_records``);
- ``{"kind": "impossible", "i": …, …, "reason": …}``: a sample the reference refused (a token
  outside the vocabulary, a token its own prefill will not take);
- ``{"kind": "error", "i": …, "reason": …}``: a request that failed (the sample is asked again on
  resumption);
- ``{"kind": "replay", "i": …, "identical": true|false}``: a seed replayed;
- ``{"kind": "look", "j": …, "n": …, "below": …, "alpha": …, "verdict": …}``: look j of the
  certificate tested n samples, those of indices below ``below`` collected, its fixed-sample tests
  at α_j (``alpha``, ``oracle.look_spending``); a resumed run's looks go on from the last j.

A line cut short by a crash (the last one) is ignored on reading, with a note.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

VERSION = 1
# the plan's fields that must agree between a run and its resumption
PLAN_KEYS = ("model", "temperature", "n_new", "k", "prompts", "seed", "reference", "server")
# the declared law and the request's shape (``--as-client``, ``--reference reported``): a run file
# written before they existed holds their defaults
LAW_DEFAULTS = {"top_p": 1.0, "sampling_top_k": 0, "min_p": 0.0, "as_client": False, "template": None, "audit": 0.1,
                "vocab": 0}
# what the looks' α spending assumes the same at every look of one certificate (``oracle.look_spending``)
CERTIFICATE_DEFAULTS = {"alpha": 1e-3, "tolerance": 1e-3, "auto_tolerance": False}
# the command-line flag of a plan field, for the messages
FLAGS = {"model": "--model", "temperature": "--temperature", "n_new": "--max-new-tokens", "k": "--top-k",
         "prompts": "--prompts", "seed": "--seed", "reference": "--reference", "server": "--server",
         "top_p": "--top-p", "sampling_top_k": "--sampling-top-k", "min_p": "--min-p", "as_client": "--as-client",
         "template": "--request-template", "audit": "--audit", "vocab": "--vocab", "alpha": "--alpha",
         "tolerance": "--tolerance", "auto_tolerance": "--tolerance auto"}


class RunFile:
    """A run file opened for appending (module doc).

    Args:
        path: the file; plan: the plan's dict (``PLAN_KEYS`` and anything else worth keeping).
        resume: continue the run in ``path`` (its header must match ``plan``) instead of
            starting a new file (which must not exist yet).
    Attributes:
        samples: {i: sample line} read back; impossible: {i: line}; replays: [line];
        errors: error lines read back; looks: the look lines read back, in order; notes: lines
        about the reading.
    Raises:
        ValueError: a new run onto an existing file, a resumption of a missing or foreign file,
            or a header that disagrees with ``plan`` (the first differing field named).
    """

    def __init__(self, path, plan: dict, resume: bool = False):
        self.path = Path(path)
        self.samples: dict = {}
        self.impossible: dict = {}
        self.replays: list = []
        self.errors: list = []
        self.looks: list = []
        self.notes: list = []
        if resume:
            self._read(plan)
            self._fh = open(self.path, "a", encoding="utf-8")
        else:
            if self.path.exists():
                raise ValueError(f"{self.path} exists: pass --resume {self.path} to continue that run, or "
                                 "another file")
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._fh = open(self.path, "x", encoding="utf-8")
            self.write({"kind": "header", "version": VERSION, "plan": plan})

    def _read(self, plan: dict) -> None:
        if not self.path.is_file():
            raise ValueError(f"--resume {self.path}: no such file")
        lines = self.path.read_text(encoding="utf-8").splitlines()
        if not lines:
            raise ValueError(f"--resume {self.path}: the file is empty")
        try:
            header = json.loads(lines[0])
        except ValueError:
            header = None
        if not isinstance(header, dict) or header.get("kind") != "header":
            raise ValueError(f"--resume {self.path}: not a certification run file (no header line)")
        if header.get("version") != VERSION:
            raise ValueError(f"--resume {self.path}: run file version {header.get('version')}, this "
                             f"program writes {VERSION}")
        old = header.get("plan") or {}
        for key, default in {**dict.fromkeys(PLAN_KEYS), **LAW_DEFAULTS, **CERTIFICATE_DEFAULTS}.items():
            if old.get(key, default) != plan.get(key, default):
                raise ValueError(f"--resume {self.path}: the run was made with {key} = {old.get(key, default)!r} "
                                 f"({FLAGS.get(key, key)}), this command asks {plan.get(key, default)!r}")
        if old.get("url") and plan.get("url") and old["url"] != plan["url"]:
            self.notes.append(f"resumed {self.path}: its samples came from {old['url']}, this run's from "
                              f"{plan['url']} (the same model, plan and seeds: one certificate of both)")
        for n, line in enumerate(lines[1:], start=2):
            try:
                event = json.loads(line)
            except ValueError:
                if n == len(lines):
                    self.notes.append(f"{self.path}: its last line was cut short (a stopped run); ignored")
                    continue
                raise ValueError(f"--resume {self.path}: line {n} is not JSON") from None
            kind = event.get("kind")
            if kind == "sample":
                self.samples[int(event["i"])] = event
                self.impossible.pop(int(event["i"]), None)
            elif kind == "impossible":
                self.impossible[int(event["i"])] = event
            elif kind == "replay":
                self.replays.append(event)
            elif kind == "error":
                self.errors.append(event)
            elif kind == "look":
                self.looks.append(event)
        if self.samples or self.impossible:
            self.notes.append(f"resumed {self.path}: {len(self.samples) + len(self.impossible)} samples read back")
        if self.looks:
            last = self.looks[-1]
            n = len(self.looks)
            self.notes.append(f"resumed {self.path}: {n} look{'s' if n > 1 else ''} taken (the last tested "
                              f"{last.get('n')} samples, {last.get('verdict')}); this run's looks are looks {n + 1}, "
                              "… of the certificate (oracle.look_spending)")
        self._header = header

    @property
    def tested(self) -> int:
        """The most samples a look of this run file tested (0 before any look): a plan whose looks
        go no further has nothing to continue."""
        return max((int(e.get("n", 0)) for e in self.looks), default=0)

    @property
    def failed_look(self) -> dict | None:
        """The first look that FAILed, or None."""
        return next((e for e in self.looks if e.get("verdict") == "FAIL"), None)

    def write(self, event: dict) -> None:
        """Append one event and flush it to the operating system (a killed process keeps it)."""
        self._fh.write(json.dumps(event, separators=(",", ":")) + "\n")
        self._fh.flush()

    def close(self) -> None:
        try:
            self._fh.flush()
            os.fsync(self._fh.fileno())
        except (OSError, ValueError):
            pass
        self._fh.close()
