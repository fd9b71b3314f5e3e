"""Training: the export of frozen dataset versions in the shapes trainers read
(``export.py``, ``card.py``), and the trainer: its request (``settings.py``), base models,
SFT, the local model as a policy, online RL with CARE, development-set evaluation, plots,
and the steps the ``trainer`` flow runs (``trainer.py``).
"""
