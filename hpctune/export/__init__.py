"""Exports of a study to the formats other tools read: CSV, HDF5, Optuna, TensorBoard, MLflow."""
