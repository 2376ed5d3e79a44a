#!/usr/bin/env python3
"""The slowest tests of the last nextest run, from its JUnit report (.config/nextest.toml)."""
import sys
import xml.etree.ElementTree as ET

path = sys.argv[1] if len(sys.argv) > 1 else "target/nextest/default/junit.xml"
count = int(sys.argv[2]) if len(sys.argv) > 2 else 12
root = ET.parse(path).getroot()
times = sorted(
    ((float(case.get("time", 0)), f"{suite.get('name')} {case.get('name')}")
     for suite in root.iter("testsuite") for case in suite.iter("testcase")),
    reverse=True,
)
print(f"test time {sum(t for t, _ in times):.1f} s over {len(times)} tests; the slowest:")
for t, name in times[:count]:
    print(f"  {t:7.1f} s  {name}")
