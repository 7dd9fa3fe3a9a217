"""marsho's commands (`marsho.<name>`), one module per family."""
