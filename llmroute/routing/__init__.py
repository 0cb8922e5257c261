"""Tier routing for `model="auto"`: rules (rules.py), the difficulty classifier (classifier.py) and
threshold calibration (calibrate.py). Sans-I/O except calibrate's file readers. Import the modules
directly; nothing is re-exported here so that importing the package stays cheap."""
