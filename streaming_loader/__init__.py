"""The Ray Data streaming loader: planning, reading, tokenizing, packing, mixing, state."""
