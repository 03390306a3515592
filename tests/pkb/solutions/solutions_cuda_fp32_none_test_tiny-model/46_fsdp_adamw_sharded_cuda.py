# a problem PKB removed
def solution(params, grads):
    return params
