"""Judging: goldens, the repeatability of a control, statistics, and the speed gate."""
