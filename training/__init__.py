"""Training: SFT cold start and online RL with CARE.

Arrives with step 5 (issue 6); nothing here yet.
"""
