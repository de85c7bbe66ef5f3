"""One module per eval suite; ``evals.registry`` names them."""
