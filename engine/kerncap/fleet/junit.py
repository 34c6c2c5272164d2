"""JUnit XML for CI (`check --junit`, `sweep --junit`): one <testcase> per case, a
<failure> for a verdict (validation FAIL, a regressed median), an <error> for a case
that could not run (its step named and marked when it needs a GPU), timings and
warnings in <system-out>."""

from __future__ import annotations

import os
import platform
import time
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from pathlib import Path

from kerncap.core.units import printable
from kerncap.fleet.files import write_atomic


@dataclass
class JUnitCase:
    classname: str
    name: str
    seconds: float
    status: str                 # pass | fail | error | skipped
    message: str = ""
    detail: str = ""
    output: list[str] = field(default_factory=list)
    properties: dict[str, str] = field(default_factory=dict)


def write(path: str | os.PathLike, suite: str, cases: list[JUnitCase], seconds: float) -> Path:
    counts = {s: sum(1 for c in cases if c.status == s) for s in ("fail", "error", "skipped")}
    suites = ET.Element("testsuites", name=suite, tests=str(len(cases)), failures=str(counts["fail"]),
                        errors=str(counts["error"]), skipped=str(counts["skipped"]), time=f"{seconds:.3f}")
    ts = ET.SubElement(suites, "testsuite", name=suite, tests=str(len(cases)), failures=str(counts["fail"]),
                       errors=str(counts["error"]), skipped=str(counts["skipped"]), time=f"{seconds:.3f}",
                       hostname=platform.node(), timestamp=time.strftime("%Y-%m-%dT%H:%M:%S"))
    for c in cases:
        tc = ET.SubElement(ts, "testcase", classname=c.classname, name=c.name, time=f"{c.seconds:.3f}")
        if c.properties:
            props = ET.SubElement(tc, "properties")
            for k, v in c.properties.items():
                ET.SubElement(props, "property", name=k, value=str(v))
        if c.status == "fail":
            ET.SubElement(tc, "failure", message=c.message, type="kerncap.verdict").text = c.detail or c.message
        elif c.status == "error":
            ET.SubElement(tc, "error", message=c.message, type="kerncap.could_not_run").text = c.detail or c.message
        elif c.status == "skipped":
            ET.SubElement(tc, "skipped", message=c.message)
        if c.output:
            ET.SubElement(tc, "system-out").text = "\n".join(c.output)
    for el in suites.iter():  # XML cannot hold control characters: a reproducer's strings are escaped
        el.text = printable(el.text) if el.text else el.text
        el.attrib.update({k: printable(v) for k, v in el.attrib.items()})
    ET.indent(suites)
    return write_atomic(path, ET.tostring(suites, encoding="utf-8", xml_declaration=True), "the JUnit report",
                        "--junit")
