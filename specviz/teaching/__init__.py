"""Teaching: the notebooks' exercise checks (`exercises`, one module per notebook) and the exact toy
language models whose distributions are known exactly (`toy`).
"""
