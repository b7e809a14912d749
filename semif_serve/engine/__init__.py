"""The scorer and the one worker thread that runs it: interface, torch and stub scorers, their checks."""
