"""The math of each learner, pure and testable without any federation."""
