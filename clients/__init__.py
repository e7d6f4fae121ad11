"""Client halves of each method (pure handlers) and the Flower ClientApp."""
