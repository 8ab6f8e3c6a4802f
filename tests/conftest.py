"""The whole suite's Hypothesis settings: no per-example deadline.  The suite runs on a
shared 2-core machine beside network-namespace tests and daemons, where one example of a
property test can take more than Hypothesis' default 200 ms without anything being wrong;
speed is measured by bench/, never by a timed test."""

from hypothesis import settings

settings.register_profile("gsn", deadline=None)
settings.load_profile("gsn")
