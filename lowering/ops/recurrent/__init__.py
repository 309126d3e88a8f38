"""Recurrent operators (LSTM, GRU, RNN): a GEMM for every step's input projection and a serial
time loop carrying the states (lowering/recurrence.py, lowering/templates/recurrent.py)."""
