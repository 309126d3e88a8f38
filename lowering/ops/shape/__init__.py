"""Data movement: views, transposes, concatenation, slicing, gathering, shape queries."""
