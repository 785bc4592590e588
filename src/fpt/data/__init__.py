"""Readers of real on-disk dataset formats and the ListOps generator.

Each module knows one format and returns plain numpy arrays (no torch):
``idx`` (MNIST / Fashion-MNIST), ``cifar`` (CIFAR-10 binary and python batches),
``lra_tsv`` (Long Range Arena ListOps TSV files and their tokenizer), ``listops``
(the LRA ListOps generator), ``tape`` (TAPE remote homology LMDB / JSON), ``npz``
(a user's own task as arrays). ``safe_pickle`` is the restricted unpickler the
CIFAR and TAPE readers share. Every mistake a user can make raises
:class:`fpt.errors.FptError` with one line naming the file and the fix.
"""
