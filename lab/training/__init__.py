"""How a model learns: the trainer, which knows no model, task or metric by name (train), one
training run with its resumable saves (runs) and when they fall due (saves), and torchrun/DDP
(distributed). May import the ground floor, lab.modeling, lab.inputs and lab.storage.
"""
