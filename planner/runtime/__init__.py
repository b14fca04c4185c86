"""What generated executors import while they run, apart from the planning stages:

    distributed.py      a data-parallel executor joins its process group at load
    checkpoint.py       state_dict / load_state_dict in PyTorch's names
    hyperparameters.py  the learning rates and weight decays an executor holds
    schedules.py        learning-rate schedules by name, as PyTorch's schedulers step them

The compiled bindings (templates/common/bindings.h) and the generated packages
(templates/*/plan/__init__.py.j2) import these by name.
"""
