"""Training: the export of frozen dataset versions in the shapes trainers read
(``export.py``, with its dataset card in ``card.py``); SFT cold start and online RL with
CARE arrive with step 5 (issue 6).
"""
