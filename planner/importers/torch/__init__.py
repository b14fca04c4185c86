"""The ATen importer: a torch.export ExportedProgram to a planner Graph (convert.py; one rule
per ATen op family in the rules*.py modules, registered in context.py's RULES). Users reach it
through `planner.torch.convert`."""
