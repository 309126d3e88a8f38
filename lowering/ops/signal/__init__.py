"""Signal operators: DFT, STFT, the window functions and MelWeightMatrix."""
