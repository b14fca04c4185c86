"""The `.pt2` reader: a program saved with torch.export.save, read without unpickling
(archive.py, ziparchive.py, saved.py), re-traced where the file needs it (retrace.py), to the
program the ATen importer converts (program.py: `load_pt2`)."""
