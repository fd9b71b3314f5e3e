"""The human gate: annotators approve, correct, reject or quarantine data in Label Studio.

Arrives with step 3 (issue 4); nothing here yet.
"""
