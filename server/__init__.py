"""Where a method's two halves meet: in-process estimators and the Flower ServerApp."""
