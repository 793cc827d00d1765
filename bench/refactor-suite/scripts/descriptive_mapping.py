file_mapping = {
    '../tests/inventory_refactor/test_stock_value_rename.py': '../problems/descriptive_problems/inventory_refactor/rename-stock-value-task.txt',
    '../tests/inventory_refactor/test_restocking_module.py': '../problems/descriptive_problems/inventory_refactor/move-restock-task.txt',
    '../tests/inventory_refactor/test_format_money_helper.py': '../problems/descriptive_problems/inventory_refactor/extract-format-money-task.txt',
    '../tests/inventory_refactor/test_add_item_takes_an_item.py': '../problems/descriptive_problems/inventory_refactor/add-item-signature-task.txt',
    '../tests/textkit_refactor/test_tokenize_words_rename.py': '../problems/descriptive_problems/textkit_refactor/rename-split-words-task.txt',
    '../tests/textkit_refactor/test_slugs_module_split.py': '../problems/descriptive_problems/textkit_refactor/split-cleaning-module-task.txt',
    '../tests/textkit_refactor/test_count_words_keyword_only.py': '../problems/descriptive_problems/textkit_refactor/count-words-keyword-task.txt',
    '../tests/textkit_refactor/test_document_stats_rename.py': '../problems/descriptive_problems/textkit_refactor/rename-textstats-task.txt',
    '../tests/geo_refactor/test_great_circle_rename.py': '../problems/descriptive_problems/geo_refactor/rename-haversine-task.txt',
    '../tests/geo_refactor/test_route_length_moved.py': '../problems/descriptive_problems/geo_refactor/move-route-length-task.txt',
    '../tests/geo_refactor/test_validate_coordinate_helper.py': '../problems/descriptive_problems/geo_refactor/extract-validate-coordinate-task.txt',
    '../tests/geo_refactor/test_haversine_takes_points.py': '../problems/descriptive_problems/geo_refactor/points-signature-task.txt',
}
