# right, through the checkout's helper module (as PKB solutions import utils.cuda_helpers)
from utils.cuda_helpers import summed


def solution(tensor):
    return summed(tensor)
